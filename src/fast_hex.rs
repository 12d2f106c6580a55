//! Hex on the request path: store keys, fencing tokens and digests are written and read
//! as hex several times per protected request (Redis keys, records, notifications).
//! `faster-hex` does 32 bytes in a few dozen instructions with SIMD, where the `hex`
//! crate takes one table step per character (~800 instructions to decode a key).

/// Lowercase hex of `src` into `dst`, which must be exactly twice as long.
pub fn encode_into(src: &[u8], dst: &mut [u8]) {
    debug_assert_eq!(dst.len(), 2 * src.len());
    // Fails only when `dst` is too short, which the callers' fixed sizes rule out.
    let _ = faster_hex::hex_encode(src, dst);
}

/// Lowercase hex of `src`, as a string (off the hot path: trace ids for display).
pub fn encode(src: &[u8]) -> String {
    let mut out = vec![0u8; 2 * src.len()];
    encode_into(src, &mut out);
    // Hex digits are ASCII.
    String::from_utf8(out).unwrap_or_default()
}

/// The `N` bytes `src` spells in hex (either case, as the `hex` crate accepts), or
/// `None` when it is not exactly `2 * N` hex digits.
pub fn decode<const N: usize>(src: &[u8]) -> Option<[u8; N]> {
    if src.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    faster_hex::hex_decode(src, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same text as the `hex` crate, both ways, and refusals for bad input.
    #[test]
    fn agrees_with_the_hex_crate() {
        let bytes: Vec<u8> = (0..=255u8).step_by(7).take(32).collect();
        let mut ours = [0u8; 64];
        encode_into(&bytes, &mut ours);
        assert_eq!(&ours[..], hex::encode(&bytes).as_bytes());
        assert_eq!(decode::<32>(&ours).unwrap().to_vec(), bytes);
        let upper = hex::encode_upper(&bytes);
        assert_eq!(decode::<32>(upper.as_bytes()).unwrap().to_vec(), bytes);
        assert_eq!(decode::<32>(&ours[..62]), None, "short");
        assert_eq!(decode::<16>(&ours), None, "long");
        let mut bad = ours;
        bad[5] = b'g';
        assert_eq!(decode::<32>(&bad), None, "not hex");
    }
}
