//! Byte sizes in flags: `1048576`, `512KiB`, `1MiB`, `16MB`. Binary (`KiB`, `MiB`, `GiB`) and
//! decimal (`KB`, `MB`, `GB`) units; `K`/`M`/`G` alone mean the binary unit.

/// Parses a byte size such as `1MiB`, `512KiB`, `16MB` or a plain number of bytes.
pub fn parse_byte_size(text: &str) -> Result<usize, String> {
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits_end);
    if number.is_empty() {
        return Err(format!(
            "invalid size {text:?}; use e.g. 1048576, 512KiB, 1MiB"
        ));
    }
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "kb" => 1_000,
        "m" | "mib" => 1 << 20,
        "mb" => 1_000_000,
        "g" | "gib" => 1 << 30,
        "gb" => 1_000_000_000,
        other => {
            return Err(format!(
                "invalid size unit {other:?} in {text:?}; use B, KiB, MiB, GiB, KB, MB or GB"
            ));
        }
    };
    let value: u64 = number
        .parse()
        .map_err(|_| format!("size {text:?} is too large"))?;
    value
        .checked_mul(multiplier)
        .and_then(|bytes| usize::try_from(bytes).ok())
        .ok_or_else(|| format!("size {text:?} is too large"))
}

/// Formats a byte size with the largest binary unit that divides it (`1MiB`, `1536KiB`).
pub fn format_byte_size(bytes: usize) -> String {
    const UNITS: [(usize, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (size, name) in UNITS {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{name}", bytes / size);
        }
    }
    format!("{bytes}B")
}
