//! Pacing. PLACEHOLDER — being written.
