//! Numbers as the tables print them.

/// `1234567` as `1,234,567` (insight's, which its flame graph titles use too).
pub(crate) use eventpipe_insight::thousands;

/// A change with its sign: `+1,024`, `-3`, `0`.
pub(crate) fn signed(n: i128) -> String {
    let magnitude = thousands(u64::try_from(n.unsigned_abs()).unwrap_or(u64::MAX));
    match n.signum() {
        1 => format!("+{magnitude}"),
        -1 => format!("-{magnitude}"),
        _ => "0".to_owned(),
    }
}

/// `n` things, in the singular for one: `1 thread`, `8 threads`.
pub(crate) fn plural(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_group_by_thousands_with_their_sign() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(21_760_056), "21,760,056");
        assert_eq!(signed(-1_024), "-1,024");
        assert_eq!(signed(5), "+5");
        assert_eq!(signed(0), "0");
        assert_eq!(plural(1, "thread"), "1 thread");
        assert_eq!(plural(0, "thread"), "0 threads");
        assert_eq!(plural(8, "distinct stack"), "8 distinct stacks");
    }
}
