//! One small deterministic generator (SplitMix64) for every test that draws at random, so a
//! failure reproduces from its seed.

/// SplitMix64: the state advances by the golden-ratio constant, the output is its mix.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`; the modulo bias is irrelevant to tests).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// An index in `0..n` (`n > 0`).
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// `len` arbitrary bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }

    /// `len` printable ASCII characters (space to `~`).
    pub fn ascii(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| b' ' + self.below(95) as u8).collect()
    }

    /// `chars` characters of UTF-8 from several planes: ASCII, Latin-1 and Latin Extended,
    /// Cyrillic, CJK, emoji.
    pub fn utf8(&mut self, chars: usize) -> Vec<u8> {
        const RANGES: [(u32, u32); 5] = [
            (0x20, 0x7F),
            (0xA0, 0x250),
            (0x400, 0x500),
            (0x4E00, 0x9FFF),
            (0x1F300, 0x1F6FF),
        ];
        let mut s = String::new();
        while s.chars().count() < chars {
            let (lo, hi) = RANGES[self.index(RANGES.len())];
            if let Some(c) = char::from_u32(lo + self.below(u64::from(hi - lo)) as u32) {
                s.push(c);
            }
        }
        s.into_bytes()
    }
}
