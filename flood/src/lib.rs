//! What the service and the load generator agree on: the ids of present and absent items,
//! and how an id becomes a store key.

/// splitmix64: spreads consecutive numbers over the key space, so that neither present nor
/// absent ids cluster in a few of sled's pages.
pub fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The id of the `i`-th present item (the loader stores items `0..n`).
pub fn present_id(i: u64) -> String {
    format!("{:016x}", mix(i))
}

/// The id of the `i`-th absent item: numbers the loader never reaches.
pub fn absent_id(i: u64) -> String {
    format!("{:016x}", mix(i | 1 << 63))
}

/// The store key of an id.
pub fn key(id: &str) -> Vec<u8> {
    format!("item/{id}").into_bytes()
}

/// The tree that holds the items.
pub const TREE: &str = "items";
