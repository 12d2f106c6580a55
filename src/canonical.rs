//! Canonical JSON: object keys sorted, no insignificant whitespace, so agents that
//! re-serialise the same arguments produce the same bytes.
