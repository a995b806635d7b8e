//! The optional inspection collectors beyond `default`, `lldp` and
//! `pci-devices` (`ipa-inspection-collectors`, PROTOCOL.md §4.4), each a pure read
//! of a root directory so tests run on the captured fixture trees: `usb-devices`,
//! `numa-topology`, `dmi-decode`, `extra-hardware` (`logs` reuses
//! [`crate::logs::bundle`]).
//! Keys and shapes are IPA's (`inspector.py`, `numa_inspector.py`,
//! `dmi_inspector.py`).

pub mod dmi;
pub mod extra;
pub mod numa;
pub mod usb;
