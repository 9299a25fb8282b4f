//! Byte sizes as the settings write them: `4M`, `64K`, `1G`, `4096` (binary units).

/// A byte count with an optional `K`/`M`/`G` suffix (binary units; `KB`, `KiB` also accepted).
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(digits_end);
    let number: u64 = digits.parse().ok()?;
    let shift = match suffix.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        _ => return None,
    };
    number.checked_mul(1u64 << shift)
}

/// A byte count in the shortest exact K/M/G form (`4M`, `1536K`, `100`).
pub fn format_size(bytes: u64) -> String {
    for (shift, suffix) in [(30, "G"), (20, "M"), (10, "K")] {
        if bytes != 0 && bytes % (1u64 << shift) == 0 {
            return format!("{}{}", bytes >> shift, suffix);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_accept_suffixes() {
        assert_eq!(parse_size("8M"), Some(8 << 20));
        assert_eq!(parse_size("64k"), Some(64 << 10));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("2MiB"), Some(2 << 20));
        assert_eq!(parse_size("M"), None);
        assert_eq!(parse_size("3T"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999G"), None);
        assert_eq!(format_size(4 << 20), "4M");
        assert_eq!(format_size(1536 << 10), "1536K");
        assert_eq!(format_size(100), "100");
        assert_eq!(format_size(0), "0");
    }
}
