//! ooode
