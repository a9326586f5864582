//! weir-wire: zero-copy packet views (being written).
