//! sled 0.34.7's crash debris, repaired at open before sled reads it: a snapshot sled left
//! torn ([`torn_snapshot`]) and a `conf` file a power cut interrupted ([`torn_conf`]).

pub(super) mod torn_conf;
pub(super) mod torn_snapshot;
