//! The boot id: which boot of the machine a crash journal was written in. A journal is
//! trusted only on the boot that wrote it (see [`crate::persist`], "Crash journal").

use std::sync::OnceLock;

/// The boot id the kernel gave this boot (Linux: `/proc/sys/kernel/random/boot_id`), or
/// `None` where there is none to read: no journal is then kept or trusted.
pub(crate) fn boot_id() -> Option<[u8; 16]> {
    #[cfg(feature = "failpoints")]
    if let Some(id) = *OVERRIDE.lock().unwrap_or_else(|p| p.into_inner()) {
        return Some(id);
    }
    static REAL: OnceLock<Option<[u8; 16]>> = OnceLock::new();
    *REAL.get_or_init(read_boot_id)
}

#[cfg(target_os = "linux")]
fn read_boot_id() -> Option<[u8; 16]> {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    parse_uuid(text.trim())
}

#[cfg(not(target_os = "linux"))]
fn read_boot_id() -> Option<[u8; 16]> {
    None
}

/// The 16 bytes of a textual UUID (hex digits, dashes ignored).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let digits: Vec<u8> = s
        .bytes()
        .filter(|b| *b != b'-')
        .map(|b| (b as char).to_digit(16).map(|d| d as u8))
        .collect::<Option<_>>()?;
    if digits.len() != 32 {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, pair) in digits.chunks(2).enumerate() {
        id[i] = pair[0] << 4 | pair[1];
    }
    Some(id)
}

#[cfg(feature = "failpoints")]
static OVERRIDE: std::sync::Mutex<Option<[u8; 16]>> = std::sync::Mutex::new(None);

/// Test seam: makes this process believe the machine booted with `id` (`None`: the real
/// boot id again), so that a test can reopen a database "after a reboot" (any other id) or
/// "in the same boot" (the id the writer used). Journals written from now on carry it too.
/// Feature `failpoints` only.
///
/// ```
/// bloomsled::persist::set_boot_id(Some([7; 16]));
/// bloomsled::persist::set_boot_id(None);
/// ```
#[cfg(feature = "failpoints")]
pub fn set_boot_id(id: Option<[u8; 16]>) {
    *OVERRIDE.lock().unwrap_or_else(|p| p.into_inner()) = id;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uuid_parses_and_junk_does_not() {
        let id = parse_uuid("0123abcd-4567-89ef-0123-456789abcdef").unwrap();
        assert_eq!(id[0], 0x01);
        assert_eq!(id[15], 0xef);
        assert_eq!(parse_uuid("xyz"), None);
        assert_eq!(parse_uuid("0123"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_machine_has_a_boot_id() {
        assert!(read_boot_id().is_some());
    }
}
