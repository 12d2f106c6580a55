//! Stored records: `decode` of any bytes (the store is shared; other software can
//! write to it) never panics, and what decodes re-encodes to a record that decodes
//! the same.
#![no_main]

use idem::store::record::{decode, encode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(record) = decode(data) {
        let bytes = encode(&record);
        let again = decode(&bytes).expect("an encoded record decodes");
        assert_eq!(again, record);
    }
});
