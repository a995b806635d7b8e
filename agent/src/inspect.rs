//! Inspection placeholder (filled in a later slice).
