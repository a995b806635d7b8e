//! An executable hardware manager's manifest (YAML): parsed and checked
//! as if it lay in `/bin`, so `executable: sh` names a real executable.
//! An accepted manifest keeps the parser's promises: identifiers, unique
//! step names, every step in some phase, time limits in range.
#![no_main]

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use agent_contents::exec_steps::manifest::{is_identifier, parse_manifest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("/bin/fuzz.yaml");
    match parse_manifest(text, path) {
        Ok(m) => {
            assert!(is_identifier(&m.name));
            assert!(!m.version.is_empty());
            let mut names = BTreeSet::new();
            for s in &m.steps {
                assert!(is_identifier(&s.name), "{}", s.name);
                assert!(names.insert(s.name.as_str()), "{} twice", s.name);
                assert!(
                    s.clean_priority.or(s.deploy_priority).or(s.service_priority).is_some()
                );
                assert!(s.argsinfo.iter().all(|a| is_identifier(&a.name)));
            }
            let hooks = m.steps.iter().map(|s| &s.hook);
            for h in hooks.chain(&m.erase_block_device).chain(&m.inspect) {
                assert!(h.timeout >= Duration::from_secs(1));
                assert!(h.timeout <= Duration::from_secs(7 * 24 * 3600));
                assert!(h.executable.is_file());
            }
        }
        Err(e) => {
            // Every refusal names the manifest.
            assert!(e.to_string().starts_with("/bin/fuzz.yaml"), "{e}");
        }
    }
});
