//! sled 0.34.7's crash debris, repaired at open before sled reads it: a snapshot sled left
//! torn ([`torn_snapshot`]) and a `conf` file a power cut interrupted ([`torn_conf`]); and
//! a read check of its log ([`log_reads`]), which sled would cut short on a failed read.

pub(super) mod log_reads;
pub(super) mod torn_conf;
pub(super) mod torn_snapshot;
