//! Allocation-free formatting into a fixed stack buffer.

pub struct Buf<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Default for Buf<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Buf<N> {
    pub const fn new() -> Self {
        Buf {
            buf: [0; N],
            len: 0,
        }
    }
    pub fn push(&mut self, s: &[u8]) -> &mut Self {
        let n = core::cmp::min(s.len(), N - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s[..n]);
        self.len += n;
        self
    }
    pub fn push_u64(&mut self, mut v: u64) -> &mut Self {
        let mut tmp = [0u8; 20];
        let mut i = tmp.len();
        if v == 0 {
            i -= 1;
            tmp[i] = b'0';
        }
        while v > 0 {
            i -= 1;
            tmp[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
        self.push(&tmp[i..])
    }
    pub fn push_i64(&mut self, v: i64) -> &mut Self {
        if v < 0 {
            self.push(b"-");
            self.push_u64(v.unsigned_abs())
        } else {
            self.push_u64(v as u64)
        }
    }
    /// Human size with two decimals: "2.00 GiB", "512.00 MiB", "17 B".
    pub fn push_size(&mut self, bytes: u64) -> &mut Self {
        const UNITS: [(&[u8], u64); 4] = [
            (b" TiB", 1 << 40),
            (b" GiB", 1 << 30),
            (b" MiB", 1 << 20),
            (b" KiB", 1 << 10),
        ];
        for (name, unit) in UNITS {
            if bytes >= unit {
                // round to hundredths
                let hundredths = ((bytes as u128 * 100 + unit as u128 / 2) / unit as u128) as u64;
                self.push_u64(hundredths / 100);
                self.push(b".");
                let f = hundredths % 100;
                if f < 10 {
                    self.push(b"0");
                }
                self.push_u64(f);
                return self.push(name);
            }
        }
        self.push_u64(bytes);
        self.push(b" B")
    }
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn sizes() {
        let mut b = Buf::<64>::new();
        b.push_size(2 << 30);
        assert_eq!(b.bytes(), b"2.00 GiB");
        let mut b = Buf::<64>::new();
        b.push_size((31 * (1u64 << 30)) / 10);
        assert_eq!(b.bytes(), b"3.10 GiB");
        let mut b = Buf::<64>::new();
        b.push_size(17);
        assert_eq!(b.bytes(), b"17 B");
        let mut b = Buf::<64>::new();
        b.push_size(1536 << 10);
        assert_eq!(b.bytes(), b"1.50 MiB");
        let mut b = Buf::<8>::new();
        b.push(b"0123456789");
        assert_eq!(b.bytes(), b"01234567");
    }
}
