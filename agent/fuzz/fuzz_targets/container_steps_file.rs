//! The container steps file (`[container] container_steps_file`): YAML
//! parsed, its steps advertised for every phase and put through the
//! container policy with their own options, as a trusted step would be.
#![no_main]

use agent_contents::container_steps::policy::{apply, Origin};
use agent_contents::container_steps::settings::ContainerSettings;
use agent_contents::container_steps::steps_file::StepsFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(file) = StepsFile::parse(text, "/fuzz/steps.yaml") else {
        return;
    };
    let reserved = |n: &str| n == "erase_devices_metadata";
    let clean = file.advertised(true, &reserved);
    let deploy = file.advertised(false, &reserved);
    // Priorities change nothing about whether a file is usable.
    assert_eq!(clean.is_ok(), deploy.is_ok());
    if let (Ok(clean), Ok(deploy)) = (clean, deploy) {
        assert_eq!(clean.len(), file.steps.len());
        assert!(deploy.iter().all(|s| s.priority == 0));
        for (c, d) in clean.iter().zip(&deploy) {
            assert_eq!(c.step, d.step);
        }
    }
    let settings = ContainerSettings::default();
    for step in &file.steps {
        assert!(file.find(&step.name).is_some());
        let _ = apply(&settings, &step.image, &step.pull_words, &step.run_words, Origin::Trusted);
    }
});
