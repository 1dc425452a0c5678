//! `gpu-quota top`: a live view of each GPU as a bar of the slices handed
//! out (one colour per container; what a burstable slice holds above its
//! guarantee, lent memory, in a lighter glyph after it) with the memory
//! physically in use below it, and the containers holding them; refreshed every second. `q`, Esc
//! or Ctrl-C leave it and restore the terminal. When stdout is not a
//! terminal (or with `--once`) it prints one plain-text frame instead.
use crate::snapshot::{self, ContainerView, GpuView, Snapshot};
use anyhow::{Context, Result};
use gpuquota_core::units::human;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct TopArgs {
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Print one plain-text frame and exit (also what happens when stdout
    /// is not a terminal).
    #[arg(long)]
    pub once: bool,
}

pub fn top(a: &TopArgs) -> Result<()> {
    let (cfg, _) = crate::ops::load()?;
    let nvml = snapshot::Nvml::init();
    if a.once || !std::io::stdout().is_terminal() {
        gpuquota_core::out!("{}", plain(&snapshot::take(&cfg, &nvml)));
        return Ok(());
    }
    let every = Duration::from_secs_f64(a.interval.clamp(0.1, 3600.0));
    let mut term = ratatui::try_init().context("setting up the terminal")?;
    let r = (|| -> Result<()> {
        loop {
            let snap = snapshot::take(&cfg, &nvml);
            term.draw(|f| draw(f, &snap))?;
            let next = Instant::now() + every;
            while let Some(left) = next.checked_duration_since(Instant::now()) {
                if !event::poll(left)? {
                    break;
                }
                if let Event::Key(k) = event::read()? {
                    let quit = k.kind != KeyEventKind::Release
                        && (matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
                            || (k.code == KeyCode::Char('c')
                                && k.modifiers.contains(KeyModifiers::CONTROL)));
                    if quit {
                        return Ok(());
                    }
                }
            }
        }
    })();
    ratatui::restore();
    r
}

/// Which container holds each of `width` cells of a GPU's bar: cells are
/// given to slices in proportion to the GPU's total memory (every slice
/// gets at least one), each followed by what it holds above its guarantee
/// (`Lent`, a burstable slice's), then to the reserve (`Reserve`), the
/// rest is free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cell {
    Slice(usize),
    Lent(usize),
    Reserve,
    Free,
}

pub fn bar(g: &GpuView, cs: &[ContainerView], width: usize) -> Vec<Cell> {
    let mut out = Vec::with_capacity(width);
    let total = g.total.max(1) as u128;
    let cells = |b: u64| ((b as u128 * width as u128).div_ceil(total) as usize).max(1);
    for (i, c) in cs.iter().enumerate() {
        for s in c.slices.iter().filter(|s| s.uuid == g.uuid) {
            let n = cells(s.bytes).min(width - out.len());
            out.extend(std::iter::repeat_n(Cell::Slice(i), n));
            // lent memory may be others' unused guarantees: past the end
            // of the bar it is cut, never drawn over another slice
            if let Some(a) = s.above().filter(|a| *a > 0) {
                let n = cells(a).min(width - out.len());
                out.extend(std::iter::repeat_n(Cell::Lent(i), n));
            }
        }
    }
    let reserve = if g.reserve == 0 { 0 } else { cells(g.reserve) };
    let free = width.saturating_sub(out.len() + reserve);
    out.extend(std::iter::repeat_n(Cell::Free, free));
    while out.len() < width {
        out.push(Cell::Reserve);
    }
    out
}

/// Cells of `width` for `used` bytes of `total`.
fn filled(used: u64, total: u64, width: usize) -> usize {
    ((used as u128 * width as u128) / total.max(1) as u128).min(width as u128) as usize
}

/// Physical use of a GPU: NVML when present, else what the containers'
/// interceptors report.
fn physical(g: &GpuView, cs: &[ContainerView]) -> (u64, &'static str) {
    match g.used {
        Some(u) => (u, "physical"),
        None => (
            cs.iter()
                .flat_map(|c| c.slices.iter())
                .filter(|s| s.uuid == g.uuid)
                .filter_map(|s| s.used)
                .sum(),
            "in containers",
        ),
    }
}

const PALETTE: [Color; 6] = [
    Color::Cyan,
    Color::Magenta,
    Color::Yellow,
    Color::Green,
    Color::Blue,
    Color::Red,
];
const GLYPHS: [char; 6] = ['#', '=', '%', '@', '&', '*'];
/// The lighter glyph of each of `GLYPHS`: what a burster holds above its
/// guarantee.
const LIGHT: [char; 6] = ['+', '-', ':', 'o', '~', ','];

/// A cell of the bar as one character (plain frames; the live view adds
/// colour).
fn glyph(c: Cell) -> char {
    match c {
        Cell::Slice(i) => GLYPHS[i % GLYPHS.len()],
        Cell::Lent(i) => LIGHT[i % LIGHT.len()],
        Cell::Reserve => 'r',
        Cell::Free => '.',
    }
}

/// A GPU's line; where bursters hold slices of it, how much it lends.
fn gpu_title(g: &GpuView, cs: &[ContainerView]) -> String {
    format!(
        "GPU {} {}{}: {} reserved of {} ({} containers){}{}",
        g.index,
        g.name,
        if g.simulated { " (simulated)" } else { "" },
        human(g.reserved),
        human(g.capacity),
        g.holders,
        if g.sm > 0 {
            format!(", {}% of the SMs shared through MPS", g.sm)
        } else {
            String::new()
        },
        snapshot::lent_on(cs, &g.uuid)
            .map(|l| format!(", {} lent above guarantees", human(l)))
            .unwrap_or_default()
    )
}

fn draw(f: &mut ratatui::Frame, s: &Snapshot) {
    let gpus = s.gpus.len() as u16;
    let rows = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(gpus * 4),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .split(f.area());
    let head = match (&s.ledger_error, &s.inventory_error) {
        (Some(e), _) | (_, Some(e)) => Line::from(Span::styled(
            format!("gpu-quota top: {e}"),
            Style::default().fg(Color::Red),
        )),
        _ => Line::from(Span::styled(
            format!(
                "gpu-quota top: {} GPU(s), {} container(s); admissions {}, refusals {}, releases {}, reclaims {}",
                s.gpus.len(),
                s.containers.len(),
                s.counters.admissions,
                s.counters.refusals.values().sum::<u64>(),
                s.counters.releases,
                s.counters.reclaims
            ),
            Style::default().add_modifier(Modifier::BOLD),
        )),
    };
    f.render_widget(Paragraph::new(head), rows[0]);
    let per = Layout::vertical(vec![Constraint::Length(4); s.gpus.len()]).split(rows[1]);
    for (g, area) in s.gpus.iter().zip(per.iter()) {
        let width = area.width.saturating_sub(9 + 26).max(10) as usize;
        let mut spans = vec![Span::raw("slices   ")];
        for c in bar(g, &s.containers, width) {
            let style = match c {
                Cell::Slice(i) => Style::default().fg(PALETTE[i % PALETTE.len()]),
                Cell::Lent(i) => Style::default()
                    .fg(PALETTE[i % PALETTE.len()])
                    .add_modifier(Modifier::DIM),
                Cell::Reserve | Cell::Free => Style::default().fg(Color::DarkGray),
            };
            spans.push(Span::styled(glyph(c).to_string(), style));
        }
        let (used, what) = physical(g, &s.containers);
        let n = filled(used, g.total, width);
        let used_line = Line::from(vec![
            Span::raw("used     "),
            Span::styled("|".repeat(n), Style::default().fg(Color::LightRed)),
            Span::styled(".".repeat(width - n), Style::default().fg(Color::DarkGray)),
            Span::raw(format!(" {} {what}", human(used))),
        ]);
        let p = Paragraph::new(vec![Line::from(spans), used_line]).block(
            Block::default()
                .borders(Borders::TOP)
                .title(gpu_title(g, &s.containers)),
        );
        f.render_widget(p, *area);
    }
    let header = Row::new([
        "",
        "CONTAINER",
        "STATE",
        "ENGINE",
        "GPU",
        "SLICE",
        "USED",
        "AGE",
    ])
    .style(Style::default().add_modifier(Modifier::BOLD));
    let body: Vec<Row> = s
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let (gpu, slice, used) = container_cols(c);
            Row::new(vec![
                ratatui::widgets::Cell::from(GLYPHS[i % GLYPHS.len()].to_string())
                    .style(Style::default().fg(PALETTE[i % PALETTE.len()])),
                c.display_name().into(),
                c.state.into(),
                c.engine.into(),
                gpu.into(),
                slice.into(),
                used.into(),
                age(c.age_secs).into(),
            ])
        })
        .collect();
    let t = Table::new(
        body,
        [
            Constraint::Length(1),
            Constraint::Min(20),
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Length(6),
            Constraint::Length(19),
            Constraint::Length(12),
            Constraint::Length(8),
        ],
    )
    .header(header)
    .block(Block::default().borders(Borders::TOP).title("containers"));
    f.render_widget(t, rows[2]);
    f.render_widget(
        Paragraph::new("q / Esc / Ctrl-C: quit").style(Style::default().fg(Color::DarkGray)),
        rows[3],
    );
}

fn container_cols(c: &ContainerView) -> (String, String, String) {
    let gpu = c
        .slices
        .iter()
        .map(|s| s.index.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let slice = c
        .slices
        .first()
        .map(|s| match s.burst {
            Some(b) => format!("{}..{}", human(s.bytes), human(b.limit_bytes)),
            None => human(s.bytes),
        })
        .unwrap_or_default();
    let used = if c.slices.iter().any(|s| s.used.is_some()) {
        human(c.slices.iter().filter_map(|s| s.used).sum())
    } else {
        "-".into()
    };
    (gpu, slice, used)
}

/// `45s`, `12m03s`, `3h05m`, `2d04h`.
pub fn age(s: u64) -> String {
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// One frame as plain text (no colours, no cursor control).
pub fn plain(s: &Snapshot) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    for e in [&s.ledger_error, &s.inventory_error].into_iter().flatten() {
        let _ = writeln!(o, "error: {e}");
    }
    const W: usize = 50;
    for g in &s.gpus {
        let _ = writeln!(o, "{}", gpu_title(g, &s.containers));
        let b: String = bar(g, &s.containers, W).into_iter().map(glyph).collect();
        let _ = writeln!(o, "  slices [{b}]");
        let (used, what) = physical(g, &s.containers);
        let n = filled(used, g.total, W);
        let _ = writeln!(
            o,
            "  used   [{}{}] {} {what}",
            "|".repeat(n),
            ".".repeat(W - n),
            human(used)
        );
    }
    let cols: Vec<_> = s.containers.iter().map(container_cols).collect();
    // SLICE widens to a burster's `guarantee..limit`
    let w = cols.iter().map(|c| c.1.len()).max().unwrap_or(0).max(11);
    let _ = writeln!(
        o,
        "\n   {:<24} {:<8} {:<10} {:<5} {:>w$} {:>11} {:>7}",
        "CONTAINER", "STATE", "ENGINE", "GPU", "SLICE", "USED", "AGE"
    );
    for (i, (c, (gpu, slice, used))) in s.containers.iter().zip(cols).enumerate() {
        let _ = writeln!(
            o,
            "{}  {:<24} {:<8} {:<10} {:<5} {:>w$} {:>11} {:>7}",
            GLYPHS[i % GLYPHS.len()],
            c.display_name(),
            c.state,
            c.engine,
            gpu,
            slice,
            used,
            age(c.age_secs)
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::SliceView;
    const G: u64 = 1 << 30;

    fn gpu(reserve: u64) -> GpuView {
        GpuView {
            index: 0,
            uuid: "GPU-0".into(),
            name: "T".into(),
            simulated: true,
            total: 16 * G,
            reserve,
            capacity: 16 * G - reserve,
            reserved: 12 * G,
            holders: 2,
            sm: 0,
            used: None,
        }
    }
    fn c(id: &str, bytes: u64, used: Option<u64>) -> ContainerView {
        ContainerView {
            id: id.into(),
            state: "running",
            engine: "runc",
            request: String::new(),
            age_secs: 3,
            slices: vec![SliceView {
                index: 0,
                uuid: "GPU-0".into(),
                bytes,
                sm: 0,
                used,
                burst: None,
            }],
            refusals: None,
            reclaim_waits: None,
            reclaim_last_ms: 0,
            workload: None,
        }
    }

    #[test]
    fn bar_is_proportional_and_reserve_at_the_end() {
        let cs = [c("a", 4 * G, None), c("b", 8 * G, None)];
        let b = bar(&gpu(2 * G), &cs, 16);
        assert_eq!(b.len(), 16);
        assert_eq!(b.iter().filter(|x| **x == Cell::Slice(0)).count(), 4);
        assert_eq!(b.iter().filter(|x| **x == Cell::Slice(1)).count(), 8);
        assert_eq!(b.iter().filter(|x| **x == Cell::Free).count(), 2);
        assert_eq!(&b[14..], &[Cell::Reserve, Cell::Reserve]);
        // a tiny slice still shows; a full GPU never overflows
        let b = bar(&gpu(0), &[c("t", 1, None), c("big", 16 * G, None)], 8);
        assert_eq!(b.len(), 8);
        assert_eq!(b[0], Cell::Slice(0));
        assert!(b[1..].iter().all(|x| *x == Cell::Slice(1)));
    }

    #[test]
    fn ages() {
        assert_eq!(age(45), "45s");
        assert_eq!(age(723), "12m03s");
        assert_eq!(age(3 * 3600 + 5 * 60 + 9), "3h05m");
        assert_eq!(age(2 * 86400 + 4 * 3600), "2d04h");
    }

    #[test]
    fn plain_frame_shows_gpus_bars_and_containers() {
        let s = Snapshot {
            gpus: vec![gpu(0)],
            containers: vec![c("alpha", 4 * G, Some(G)), c("beta", 8 * G, None)],
            ..Default::default()
        };
        let t = plain(&s);
        assert!(
            t.contains("GPU 0 T (simulated): 12.00 GiB reserved of 16.00 GiB"),
            "{t}"
        );
        let slices = t.lines().find(|l| l.contains("slices [")).unwrap();
        assert_eq!(slices.matches('#').count(), 13, "{slices}"); // 4/16 of 50, rounded up
        assert_eq!(slices.matches('=').count(), 25, "{slices}");
        assert!(t.contains("1.00 GiB in containers"), "{t}");
        let alpha = t.lines().find(|l| l.contains("alpha")).unwrap();
        assert!(
            alpha.contains("4.00 GiB") && alpha.contains("1.00 GiB"),
            "{alpha}"
        );
        assert!(!t.contains('\x1b'), "no escape sequences");
    }

    /// A burster holding 6 GiB of a 4 GiB guarantee (limit 16 GiB) beside
    /// a guaranteed 8 GiB slice.
    #[test]
    fn a_bursters_lent_memory_is_drawn_lighter_and_the_gpu_says_how_much_it_lends() {
        let mut b = c("burst", 4 * G, Some(6 * G));
        b.slices[0].burst = Some(gpuquota_core::formats::grant::Burst {
            limit_bytes: 16 * G,
            priority: 0,
        });
        let cs = [b, c("plain", 8 * G, Some(9 * G))];
        let bar16 = bar(&gpu(0), &cs, 16);
        let count = |x: Cell| bar16.iter().filter(|y| **y == x).count();
        assert_eq!(
            (count(Cell::Slice(0)), count(Cell::Lent(0))),
            (4, 2),
            "{bar16:?}"
        );
        assert_eq!(
            &bar16[4..6],
            &[Cell::Lent(0), Cell::Lent(0)],
            "after its guarantee"
        );
        assert_eq!(count(Cell::Lent(1)), 0, "a guaranteed slice lends nothing");
        let t = plain(&Snapshot {
            gpus: vec![gpu(0)],
            containers: cs.to_vec(),
            ..Default::default()
        });
        assert!(t.contains(", 2.00 GiB lent above guarantees"), "{t}");
        let slices = t.lines().find(|l| l.contains("slices [")).unwrap();
        assert_eq!(slices.matches('+').count(), 7, "{slices}"); // 2/16 of 50, rounded up
        let row = t.lines().find(|l| l.contains("burst")).unwrap();
        assert!(row.contains("4.00 GiB..16.00 GiB"), "{row}");
        // no burster on the GPU: nothing said of lending
        let t = plain(&Snapshot {
            gpus: vec![gpu(0)],
            containers: vec![c("plain", 8 * G, None)],
            ..Default::default()
        });
        assert!(!t.contains("lent"), "{t}");
    }
}
