//! Arm processor names: `/proc/cpuinfo` on Arm has no `model name`, only
//! the `CPU implementer` and `CPU part` numbers of the MIDR register. IPA
//! reports what `lscpu` prints as "Model name", which util-linux decodes
//! from those two numbers with its tables (`sys-utils/lscpu-arm.c`); this
//! is the part of those tables for the cores found in Arm servers and in
//! QEMU's `virt` machine, with lscpu's names. An unknown pair is reported with its numbers,
//! never guessed.

/// A vendor's cores: (part number, core name).
type Parts = &'static [(u32, &'static str)];

/// (implementer, vendor name, its cores), numbers as in `lscpu-arm.c`.
const IMPLEMENTERS: &[(u32, &str, Parts)] = &[
    (
        0x41,
        "ARM",
        &[
            (0xd03, "Cortex-A53"),
            (0xd04, "Cortex-A35"),
            (0xd05, "Cortex-A55"),
            (0xd07, "Cortex-A57"),
            (0xd08, "Cortex-A72"),
            (0xd09, "Cortex-A73"),
            (0xd0a, "Cortex-A75"),
            (0xd0b, "Cortex-A76"),
            (0xd0c, "Neoverse-N1"),
            (0xd0d, "Cortex-A77"),
            (0xd40, "Neoverse-V1"),
            (0xd41, "Cortex-A78"),
            (0xd49, "Neoverse-N2"),
            (0xd4f, "Neoverse-V2"),
        ],
    ),
    (0x42, "Broadcom", &[(0x516, "ThunderX2")]),
    (
        0x43,
        "Cavium",
        &[
            (0x0a1, "ThunderX-88XX"),
            (0x0a2, "ThunderX-81XX"),
            (0x0a3, "ThunderX-83XX"),
            (0x0af, "ThunderX2-99xx"),
            (0x0b8, "ThunderX3-T110"),
        ],
    ),
    (0x46, "FUJITSU", &[(0x001, "A64FX")]),
    // HiSilicon's 0xd40 is its Cortex-A76, not Arm's Neoverse-V1.
    (
        0x48,
        "HiSilicon",
        &[(0xd01, "Kunpeng-920"), (0xd40, "Cortex-A76")],
    ),
    (0x4e, "NVIDIA", &[(0x004, "Carmel")]),
    (0x50, "APM", &[(0x000, "X-Gene")]),
    (
        0x51,
        "Qualcomm",
        &[(0xc00, "Falkor"), (0x800, "Falkor-V1/Kryo")],
    ),
    (0xc0, "Ampere", &[(0xac3, "Ampere-1"), (0xac4, "Ampere-1a")]),
];

/// A number as cpuinfo prints it (`0x41`, `0xd0c`); `None` if it is not one.
fn number(text: &str) -> Option<u32> {
    let hex = text.trim().strip_prefix("0x")?;
    u32::from_str_radix(hex, 16).ok()
}

/// The model name for an implementer and part as cpuinfo prints them:
/// the core's name when the table knows it (`Neoverse-N1`, as lscpu), else
/// the vendor and the part number (`Ampere part 0xfff`), else both numbers
/// (`CPU implementer 0x99 part 0x123`). `None` when neither field exists.
pub(crate) fn model_name(implementer: Option<&str>, part: Option<&str>) -> Option<String> {
    let (imp_text, part_text) = match (implementer, part) {
        (None, None) => return None,
        (i, p) => (i.unwrap_or("?"), p.unwrap_or("?")),
    };
    let vendor = number(imp_text).and_then(|i| IMPLEMENTERS.iter().find(|(n, _, _)| *n == i));
    let Some((_, vendor, parts)) = vendor else {
        return Some(format!("CPU implementer {imp_text} part {part_text}"));
    };
    let core = number(part_text).and_then(|p| parts.iter().find(|(n, _)| *n == p));
    Some(match core {
        Some((_, name)) => (*name).to_string(),
        None => format!("{vendor} part {part_text}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_cores_by_name_unknown_ones_by_number() {
        assert_eq!(
            model_name(Some("0x41"), Some("0xd07")).as_deref(),
            Some("Cortex-A57")
        );
        // Ampere Altra's cores are Arm's Neoverse-N1.
        assert_eq!(
            model_name(Some("0x41"), Some("0xd0c")).as_deref(),
            Some("Neoverse-N1")
        );
        // The part number is the vendor's own.
        assert_eq!(
            model_name(Some("0x41"), Some("0xd40")).as_deref(),
            Some("Neoverse-V1")
        );
        assert_eq!(
            model_name(Some("0x48"), Some("0xd40")).as_deref(),
            Some("Cortex-A76")
        );
        assert_eq!(
            model_name(Some("0xc0"), Some("0xac3")).as_deref(),
            Some("Ampere-1")
        );
        assert_eq!(
            model_name(Some("0xc0"), Some("0xfff")).as_deref(),
            Some("Ampere part 0xfff")
        );
        assert_eq!(
            model_name(Some("0x99"), Some("0x123")).as_deref(),
            Some("CPU implementer 0x99 part 0x123")
        );
        assert_eq!(
            model_name(Some("junk"), None).as_deref(),
            Some("CPU implementer junk part ?")
        );
        assert_eq!(model_name(None, None), None);
    }

    #[test]
    fn every_number_in_the_table_is_unique_per_vendor() {
        let mut vendors: Vec<u32> = IMPLEMENTERS.iter().map(|(n, _, _)| *n).collect();
        vendors.sort();
        vendors.dedup();
        assert_eq!(vendors.len(), IMPLEMENTERS.len());
        for (_, vendor, parts) in IMPLEMENTERS {
            let mut p: Vec<u32> = parts.iter().map(|(n, _)| *n).collect();
            p.sort();
            p.dedup();
            assert_eq!(p.len(), parts.len(), "{vendor}");
        }
    }
}
