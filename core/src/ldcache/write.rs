//! The new-format writer: entries in ldconfig's order, one string table
//! sharing suffixes as glibc's does, extensions kept.
use super::*;

impl LdCache {
    /// Serialize in the new format, entries in ldconfig's order, strings
    /// written up to their first NUL, extensions kept. Offsets are 32-bit:
    /// a cache over 4 GiB (never one from `parse`) is not representable and
    /// its offsets saturate.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_bytes_within(&mut Work::unlimited())
            .expect("an unlimited budget is never exceeded")
    }

    /// [`LdCache::to_bytes`], counting into (and refused past) `work`.
    pub fn to_bytes_within(&self, work: &mut Work) -> Result<Vec<u8>> {
        let keys = self.sort_keys(work)?;
        let mut order: Vec<usize> = (0..self.entries.len()).collect();
        let mut compared = 0u64;
        order.sort_by(|&a, &b| {
            compared += 1;
            keys[a].cmp(&keys[b])
        });
        work.spend(compared * SORT_KEY_UNITS)?;
        let order: Vec<&Entry> = order.iter().map(|&i| &self.entries[i]).collect();

        let strings = order
            .iter()
            .flat_map(|e| [c_str(&e.key), c_str(&e.value)])
            .chain(self.hwcaps.iter().map(|h| c_str(h)));
        let (table, offsets) = string_table(strings, work)?;

        let n = order.len();
        let str_start = NEW_HEADER + n * NEW_ENTRY;
        let mut offsets = offsets
            .into_iter()
            .map(|off| sat32(str_start.saturating_add(off)));
        let mut at = || offsets.next().unwrap_or(0);
        let strings_end = str_start + table.len();
        let has_ext = self.generator.is_some() || !self.hwcaps.is_empty();
        let ext_off = strings_end.next_multiple_of(4);

        let mut out = Vec::with_capacity(ext_off + 64);
        out.extend_from_slice(NEW_MAGIC);
        out.extend_from_slice(&sat32(n).to_ne_bytes());
        out.extend_from_slice(&sat32(table.len()).to_ne_bytes());
        out.extend_from_slice(&[ENDIAN_CURRENT, 0, 0, 0]);
        out.extend_from_slice(&(if has_ext { sat32(ext_off) } else { 0 }).to_ne_bytes());
        out.extend_from_slice(&[0; 12]);
        for e in &order {
            work.spend(NEW_ENTRY as u64)?;
            out.extend_from_slice(&e.flags.to_ne_bytes());
            out.extend_from_slice(&at().to_ne_bytes());
            out.extend_from_slice(&at().to_ne_bytes());
            out.extend_from_slice(&e.osversion.to_ne_bytes());
            out.extend_from_slice(&e.hwcap.to_ne_bytes());
        }
        out.extend_from_slice(&table);
        work.spend(table.len() as u64)?;
        if !has_ext {
            return Ok(out);
        }
        out.resize(ext_off, 0);

        // ldconfig's write_extensions: directory, hwcaps array, generator.
        let mut sections: Vec<(u32, usize)> = Vec::new();
        if let Some(g) = &self.generator {
            sections.push((EXTENSION_TAG_GENERATOR, g.len()));
        }
        if !self.hwcaps.is_empty() {
            sections.push((EXTENSION_TAG_GLIBC_HWCAPS, 4 * self.hwcaps.len()));
        }
        let data_start = ext_off + EXT_HEADER + EXT_SECTION * sections.len();
        let hwcaps_off = data_start;
        let generator_off = data_start + 4 * self.hwcaps.len();
        out.extend_from_slice(&EXTENSION_MAGIC.to_ne_bytes());
        out.extend_from_slice(&sat32(sections.len()).to_ne_bytes());
        for &(tag, size) in &sections {
            let off = if tag == EXTENSION_TAG_GENERATOR {
                generator_off
            } else {
                hwcaps_off
            };
            out.extend_from_slice(&tag.to_ne_bytes());
            out.extend_from_slice(&0u32.to_ne_bytes());
            out.extend_from_slice(&sat32(off).to_ne_bytes());
            out.extend_from_slice(&sat32(size).to_ne_bytes());
        }
        for _ in &self.hwcaps {
            work.spend(4)?;
            out.extend_from_slice(&at().to_ne_bytes());
        }
        if let Some(g) = &self.generator {
            work.spend(g.len() as u64)?;
            out.extend_from_slice(g);
        }
        Ok(out)
    }
}

/// A NUL-separated table holding every string once, a string that ends
/// another one sharing its bytes (as glibc's stringtable does), and the
/// offset in it of each of `strings`, in their order.
fn string_table<'a>(
    strings: impl Iterator<Item = &'a [u8]>,
    work: &mut Work,
) -> Result<(Vec<u8>, Vec<usize>)> {
    // Distinct strings (each hashed once), with their bytes reversed once.
    let mut ids: HashMap<&[u8], usize> = HashMap::new();
    let mut uniq: Vec<(Vec<u8>, &[u8], usize)> = Vec::new();
    let mut id_of = Vec::new();
    for s in strings {
        work.spend(2 * s.len() as u64 + 1)?;
        let id = match ids.get(s) {
            Some(&id) => id,
            None => {
                work.spend(s.len() as u64)?;
                let id = uniq.len();
                uniq.push((s.iter().rev().copied().collect(), s, id));
                ids.insert(s, id);
                id
            }
        };
        id_of.push(id);
    }
    // Sorted by reversed bytes, every string that ends another comes just
    // before the strings it ends, so walking backwards the current "owner"
    // (the longest string of its run) is the only candidate.
    let mut units = 0u64;
    uniq.sort_by(|a, b| {
        let (o, u) = cmp_len(&a.0, &b.0);
        units += u;
        o
    });
    work.spend(units)?;
    let mut table = Vec::new();
    let mut offset = vec![0; uniq.len()];
    let mut owner: Option<(&[u8], usize)> = None;
    for (_, s, id) in uniq.into_iter().rev() {
        work.spend(2 * s.len() as u64 + 1)?;
        match owner {
            Some((o, off)) if o.ends_with(s) => offset[id] = off + (o.len() - s.len()),
            _ => {
                let off = table.len();
                table.extend_from_slice(s);
                table.push(0);
                offset[id] = off;
                owner = Some((s, off));
            }
        }
    }
    Ok((table, id_of.into_iter().map(|id| offset[id]).collect()))
}
