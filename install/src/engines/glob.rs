//! The one glob of the installer: Go's `path.Match`, the rule containerd
//! applies to `imports` (per path component, through `filepath.Match`) and
//! to `pod_annotations` / `container_annotations` (`path.Match` on the key).
//! `*` matches any run of characters but '/', `?` one character but '/',
//! `[a-z]`, `[^x]` / `[!x]` a class (never '/'), `\` escapes; a malformed
//! pattern (unterminated class) matches nothing, like Go's ErrBadPattern.

/// Whether `name` matches `pattern` (Go's `path.Match`).
pub fn path_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = name.chars().collect();
    matches(&p, &s)
}

/// Whether `s` has glob metacharacters.
pub fn has_meta(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

fn matches(p: &[char], s: &[char]) -> bool {
    match p.first() {
        None => s.is_empty(),
        Some('*') => (0..=s.len())
            .take_while(|&i| i == 0 || s[i - 1] != '/')
            .any(|i| matches(&p[1..], &s[i..])),
        Some('?') => s.first().is_some_and(|&c| c != '/') && matches(&p[1..], &s[1..]),
        Some('\\') if p.len() > 1 => s.first() == Some(&p[1]) && matches(&p[2..], &s[1..]),
        Some('[') => {
            let Some(&c) = s.first() else { return false };
            let mut i = 1;
            let negate = matches!(p.get(1), Some('^') | Some('!'));
            if negate {
                i += 1;
            }
            let mut hit = false;
            let mut first = true;
            while i < p.len() && (p[i] != ']' || first) {
                first = false;
                if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
                    hit |= p[i] <= c && c <= p[i + 2];
                    i += 3;
                } else {
                    hit |= p[i] == c;
                    i += 1;
                }
            }
            if i >= p.len() {
                return false; // unterminated class: no match, like Go's ErrBadPattern
            }
            c != '/' && hit != negate && matches(&p[i + 1..], &s[1..])
        }
        Some(c) => s.first() == Some(c) && matches(&p[1..], &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_path_match_rules() {
        assert!(path_match("gpu-quota.io/*", "gpu-quota.io/vram"));
        assert!(path_match("*", "vram") && path_match("", "") && !path_match("", "x"));
        assert!(!path_match("vram", "vram2") && !path_match("vram*", "vra"));
        // `*`, `?` and classes stop at '/'
        assert!(!path_match("gpu*", "gpu-quota.io/vram"));
        assert!(!path_match("gpu-quota.io?vram", "gpu-quota.io/vram"));
        assert!(!path_match("gpu-quota.io[^a]vram", "gpu-quota.io/vram"));
        assert!(path_match("*/*", "gpu-quota.io/vram"));
        // classes, negation, ranges, escapes
        assert!(path_match("[v]ram", "vram") && path_match("gpu?", "gpus"));
        assert!(path_match("[a-h]pu", "gpu") && !path_match("[^g]pu", "gpu"));
        assert!(path_match("[!x]pu", "gpu") && path_match(r"a\*b", "a*b"));
        assert!(!path_match(r"a\*b", "axb"));
        // malformed: nothing matches
        assert!(!path_match("[gpu", "g") && !path_match("[gpu", "[gpu"));
    }
}
