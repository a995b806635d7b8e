//! Who may get a root prompt in the ramdisk, decided once by PID 1 from the
//! kernel parameters (merged with the virtual floppy's and, for `ipa-debug`,
//! IPA's configuration files' `debug`, as the agent reads them).
//!
//! Design: every way in is its own explicit option, and none of them is
//! one that Ironic adds by itself. Ironic appends `ipa-debug=1` whenever its
//! conductor logs at debug level, so `ipa-debug` does what it does in IPA
//! (the agent logs at debug level) and nothing more. The passwordless root
//! shell on the console needs [`SHELL`]; `rootpwd=` gives a login prompt
//! (the password is checked); `sshkey=` gives key-only SSH. After a rescue
//! the `rescue` user takes passwords over SSH, and root's `rootpwd=`
//! password is locked first unless [`ROOTPWD_AFTER_RESCUE`] asks to keep it
//! (dropbear's `-g` cannot do it: it refuses passwords to every uid 0, and
//! the `rescue` user is uid 0 because this ramdisk has no sudo).

use agent_base::config::KernelParams;

/// A passwordless root shell on the console (`agent.shell=1`): anyone at
/// the console, the BMC's serial-over-LAN or KVM included, is root.
pub(crate) const SHELL: &str = "agent.shell";

/// IPA's debug flag: the agent logs at debug level.
pub(crate) const DEBUG: &str = "ipa-debug";

/// After a rescue, root keeps its `rootpwd=` password (console and SSH,
/// which then takes passwords); without it root's password is locked.
pub(crate) const ROOTPWD_AFTER_RESCUE: &str = "agent.rootpwd-after-rescue";

/// What PID 1 offers, from the kernel parameters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Access {
    /// The passwordless root shell on the console ([`SHELL`]).
    pub shell: bool,
    /// `agent ramdisk --debug` ([`DEBUG`]).
    pub debug_logging: bool,
    /// Root's `rootpwd=` password stays valid after a rescue
    /// ([`ROOTPWD_AFTER_RESCUE`]).
    pub rootpwd_after_rescue: bool,
    /// Values that were not booleans (each then counts as off), for the console.
    pub notes: Vec<String>,
}

impl Access {
    /// Reads the three options. Only a true boolean (`1/true/yes/on`, or the
    /// bare name) turns one on; anything malformed is off and noted, so a
    /// typo never opens a shell.
    pub(crate) fn from_params(params: &KernelParams) -> Self {
        let mut notes = Vec::new();
        let mut on = |key: &str| match params.bool(key) {
            Ok(v) => v.unwrap_or(false),
            Err(e) => {
                notes.push(format!("{e}; {key} stays off"));
                false
            }
        };
        let shell = on(SHELL);
        let debug_logging = on(DEBUG);
        let rootpwd_after_rescue = on(ROOTPWD_AFTER_RESCUE);
        Self {
            shell,
            debug_logging,
            rootpwd_after_rescue,
            notes,
        }
    }

    /// `agent` arguments for the service PID 1 supervises.
    pub(crate) fn agent_args(&self) -> Vec<String> {
        let mut args = vec!["ramdisk".to_string()];
        if self.debug_logging {
            args.push("--debug".into());
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(cmdline: &str) -> Access {
        Access::from_params(&KernelParams::parse(cmdline))
    }

    #[test]
    fn ipa_debug_logs_verbosely_and_opens_no_shell() {
        // What Ironic appends when its conductor logs at debug level.
        let a = access("ipa-api-url=http://10.0.0.1:6385 BOOTIF=01-52-54-00-12-34-56 ipa-debug=1");
        assert!(a.debug_logging);
        assert!(!a.shell, "ipa-debug must not open a shell");
        assert!(!a.rootpwd_after_rescue);
        assert_eq!(a.agent_args(), ["ramdisk", "--debug"]);
        assert!(a.notes.is_empty(), "{:?}", a.notes);
    }

    #[test]
    fn the_shell_needs_its_own_option() {
        for on in [
            "agent.shell=1",
            "agent.shell=yes",
            "agent.shell",
            "agent.shell=ON",
        ] {
            let a = access(&format!("quiet {on}"));
            assert!(a.shell, "{on}");
            assert!(!a.debug_logging, "{on}");
            assert_eq!(a.agent_args(), ["ramdisk"]);
        }
        for off in [
            "",
            "agent.shell=0",
            "agent.shell=no",
            "xagent.shell=1",
            "agent.shell1=1",
        ] {
            assert!(!access(off).shell, "{off:?}");
        }
    }

    #[test]
    fn a_malformed_value_is_off_and_said() {
        let a = access("agent.shell=maybe ipa-debug=perhaps agent.rootpwd-after-rescue=2");
        assert_eq!(
            (a.shell, a.debug_logging, a.rootpwd_after_rescue),
            (false, false, false)
        );
        assert_eq!(a.notes.len(), 3, "{:?}", a.notes);
        assert!(a.notes[0].contains("agent.shell"), "{:?}", a.notes);
        assert!(a.notes[0].contains("maybe"), "{:?}", a.notes);
    }

    #[test]
    fn root_keeps_its_password_after_rescue_only_when_asked() {
        assert!(!access("rootpwd=\"$6$s$h\"").rootpwd_after_rescue);
        assert!(access("rootpwd=\"$6$s$h\" agent.rootpwd-after-rescue=1").rootpwd_after_rescue);
    }
}
