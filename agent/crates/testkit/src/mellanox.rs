//! Stand-in mstflint, mstconfig, mstfwreset and lspci for tests: no
//! Mellanox/NVIDIA NIC exists on the machines these tests run on, so each
//! tool is a shell script that records its command line and answers from
//! files the test writes (output in the shapes of IPA 13's own unit tests,
//! which come from real ConnectX cards). A burn copies the image it was
//! given, so a test sees exactly what would have been flashed.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// `mstflint -d DEV -qq query` of a ConnectX-6 (IPA's fixture).
pub fn device_query(fw: &str, running: Option<&str>, psid: &str) -> String {
    let running = running.map_or(String::new(), |r| format!("FW Version(Running):   {r}\n"));
    format!(
        "Image type:            FS4\n\
         FW Version:            {fw}\n\
         {running}\
         FW Release Date:       28.10.2022\n\
         Product Version:       {fw}\n\
         Rom Info:              type=UEFI version=14.28.15 cpu=AMD64,AARCH64\n\
         \x20                      type=PXE version=3.6.804 cpu=AMD64\n\
         Description:           UID                GuidsNumber\n\
         Base GUID:             043f720300f04c46        8\n\
         Base MAC:              043f72f04c46            8\n\
         Image VSD:             N/A\n\
         Device VSD:            N/A\n\
         PSID:                  {psid}\n\
         Security Attributes:   N/A\n"
    )
}

/// `mstconfig -d DEV q` with `rows` (name, value) (IPA's fixture shape).
pub fn mstconfig_query(pci: &str, rows: &[(&str, &str)]) -> String {
    let mut s = format!(
        "\nDevice #1:\n----------\n\nDevice type:    ConnectX6\nName:           MCX654106A-HCA_Ax\nDevice:         {pci}\n\nConfigurations:                              Next Boot\n"
    );
    for (n, v) in rows {
        s.push_str(&format!("         {n:<36}{v}\n"));
    }
    s
}

/// `mstconfig -d DEV i` (IPA's fixture).
pub const MSTCONFIG_INFO: &str = "List of configurations the device 0000:06:00.0 may support:
    GLOBAL PCI CONF:
        SRIOV_EN=<False|True> Enable Single-Root I/O Virtualization (SR-IOV)
        NUM_OF_VFS=<NUM>      The total number of Virtual Functions (VFs)
    PF PCI CONF:

        PF_TOTAL_SF=<NUM>     The total number of Sub Function partitions
                              (SFs) that can be supported, for this PF.
                              alid only when PER_PF_NUM_SF is set to TRUE
    INTERNAL HAIRPIN CONF:
        ESWITCH_HAIRPIN_TOT_BUFFER_SIZE=<NUM>   Log(base 2) of the buffer size
                                                (in bytes) allocated
                                                internally for hairpin for a
                                                given IEEE802.1p priority i.

";

/// A directory of stand-in tools and the files they answer from.
#[derive(Debug)]
pub struct Bed {
    _dir: tempfile::TempDir,
    /// The tools' directory (the search path).
    pub bin: PathBuf,
    /// The answers and the call log.
    pub state: PathBuf,
}

impl Default for Bed {
    fn default() -> Bed {
        Bed::new()
    }
}

impl Bed {
    /// All four tools, answering nothing yet (no NIC).
    pub fn new() -> Bed {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let bin = dir.path().join("bin");
        let state = dir.path().join("state");
        std::fs::create_dir_all(&bin).expect("bin");
        std::fs::create_dir_all(&state).expect("state");
        let bed = Bed {
            _dir: dir,
            bin,
            state,
        };
        bed.write("lspci.out", "");
        let s = bed.state.display().to_string();
        bed.tool("mstflint", &r#"S='@S@'
echo "mstflint $*" >> "$S/calls"
case "$1" in
  -v) echo "mstflint, mstflint 4.26.0-1, Git SHA Hash: N/A"; exit 0;;
  -i) cat "$S/image.query"; exit 0;;
  -d) dev="$2"; shift 2
      case "$*" in
        "-qq query") cat "$S/dev-$dev.query" 2>/dev/null || { echo "-E- Cannot open device $dev" >&2; exit 1; };;
        *burn) if [ -e "$S/fail-burn" ]; then echo "-E- Burning FS4 image failed: Bad parameter" >&2; exit 1; fi
               cp "$2" "$S/burnt-$dev";;
        *) echo "unexpected: $*" >&2; exit 2;;
      esac;;
  *) echo "unexpected: $*" >&2; exit 2;;
esac
"#
        .replace("@S@", &s));
        bed.tool(
            "mstconfig",
            &r#"S='@S@'
echo "mstconfig $*" >> "$S/calls"
case "$1" in -v) echo "mstconfig, mstflint 4.26.0-1"; exit 0;; esac
dev="$2"
case "$3" in
  i) cat "$S/mstconfig-i";;
  q) cat "$S/mstconfig-q-$dev";;
  -y) exit 0;;
  *) echo "unexpected: $*" >&2; exit 2;;
esac
"#
            .replace("@S@", &s),
        );
        bed.tool(
            "mstfwreset",
            &r#"S='@S@'
echo "mstfwreset $*" >> "$S/calls"
case "$1" in -v) echo "mstfwreset, mstflint 4.26.0-1"; exit 0;; esac
if [ -e "$S/fail-reset" ]; then echo "-E- Reset failed" >&2; exit 1; fi
"#
            .replace("@S@", &s),
        );
        bed.tool(
            "lspci",
            &r#"S='@S@'
echo "lspci $*" >> "$S/calls"
case "$1" in --version) echo "lspci version 3.10.0"; exit 0;; esac
cat "$S/lspci.out"
"#
            .replace("@S@", &s),
        );
        bed.write("mstconfig-i", MSTCONFIG_INFO);
        bed
    }

    fn tool(&self, name: &str, body: &str) {
        let p = self.bin.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}")).expect("a tool");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    /// Writes answer file `name`.
    pub fn write(&self, name: &str, text: &str) {
        std::fs::write(self.state.join(name), text).expect("an answer");
    }

    /// The search path holding the tools.
    pub fn path(&self) -> OsString {
        self.bin.clone().into_os_string()
    }

    /// Removes tool `name`.
    pub fn remove(&self, name: &str) {
        std::fs::remove_file(self.bin.join(name)).expect("remove a tool");
    }

    /// A NIC function `pci` of device ID `id` whose firmware query is
    /// `query`.
    pub fn nic(&self, pci: &str, id: &str, query: &str) {
        let mut lspci = std::fs::read_to_string(self.state.join("lspci.out")).unwrap_or_default();
        lspci.push_str(&format!("{pci} 0207: 15b3:{id}\n"));
        self.write("lspci.out", &lspci);
        self.write(&format!("dev-{pci}.query"), query);
    }

    /// The tools' command lines so far, the version checks left out.
    pub fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.state.join("calls"))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.ends_with(" -v") && !l.ends_with(" --version"))
            .map(str::to_string)
            .collect()
    }

    /// What was burnt on `pci`, if anything.
    pub fn burnt(&self, pci: &str) -> Option<Vec<u8>> {
        std::fs::read(self.state.join(format!("burnt-{pci}"))).ok()
    }

    /// A scratch directory for downloads.
    pub fn scratch(&self) -> PathBuf {
        let p = self.state.join("scratch");
        std::fs::create_dir_all(&p).expect("scratch");
        p
    }
}

/// A sysfs tree with interfaces `(name, vendor)`.
pub fn sysfs(root: &Path, nics: &[(&str, &str)]) {
    for (name, vendor) in nics {
        let dev = root.join("class/net").join(name).join("device");
        std::fs::create_dir_all(&dev).expect("sysfs");
        std::fs::write(dev.join("vendor"), format!("{vendor}\n")).expect("vendor");
    }
}
