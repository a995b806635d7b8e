//! Bonds through the bonding driver's sysfs interface
//! (Documentation/networking/bonding.rst): create the master, set its mode
//! and monitoring while it has no members, enslave NICs that are down.
//! Takes the sysfs root so the sequence is tested on a fixture.

use std::path::Path;

use anyhow::{bail, Context, Result};

use super::network_data::Bond;

fn write(sys: &Path, rel: &str, value: &str) -> Result<()> {
    let path = sys.join(rel);
    std::fs::write(&path, value).with_context(|| format!("writing {value:?} to {}", path.display()))
}

/// Creates bond `name` with `bond`'s settings and members; `set_down`
/// takes a member down before it is enslaved. An existing bond of that name
/// is reused (its settings are written again).
pub(crate) fn create(
    sys: &Path,
    name: &str,
    bond: &Bond,
    set_down: &mut dyn FnMut(&str) -> Result<()>,
) -> Result<()> {
    let masters = sys.join("class/net/bonding_masters");
    if !masters.exists() {
        bail!(
            "the bonding driver is not loaded ({} is missing)",
            masters.display()
        );
    }
    if !sys.join("class/net").join(name).exists() {
        write(sys, "class/net/bonding_masters", &format!("+{name}"))?;
    }
    let dir = format!("class/net/{name}/bonding");
    write(sys, &format!("{dir}/mode"), &bond.mode)?;
    write(sys, &format!("{dir}/miimon"), &bond.miimon.to_string())?;
    if let Some(p) = &bond.xmit_hash_policy {
        write(sys, &format!("{dir}/xmit_hash_policy"), p)?;
    }
    if let Some(r) = &bond.lacp_rate {
        write(sys, &format!("{dir}/lacp_rate"), r)?;
    }
    let current = std::fs::read_to_string(sys.join(format!("{dir}/slaves"))).unwrap_or_default();
    for m in &bond.members {
        if current.split_whitespace().any(|s| s == m) {
            continue;
        }
        set_down(m).with_context(|| format!("taking {m} down to join {name}"))?;
        write(sys, &format!("{dir}/slaves"), &format!("+{m}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_settings_before_members_and_takes_members_down() {
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path();
        std::fs::create_dir_all(sys.join("class/net/bond0/bonding")).unwrap();
        std::fs::write(sys.join("class/net/bonding_masters"), "").unwrap();
        std::fs::write(sys.join("class/net/bond0/bonding/slaves"), "eth1\n").unwrap();
        let bond = Bond {
            members: vec!["eth0".into(), "eth1".into()],
            mode: "802.3ad".into(),
            miimon: 100,
            xmit_hash_policy: Some("layer3+4".into()),
            lacp_rate: None,
        };
        let mut downed = Vec::new();
        create(sys, "bond0", &bond, &mut |n| {
            downed.push(n.to_string());
            Ok(())
        })
        .unwrap();
        let read =
            |f: &str| std::fs::read_to_string(sys.join("class/net/bond0/bonding").join(f)).unwrap();
        assert_eq!(read("mode"), "802.3ad");
        assert_eq!(read("miimon"), "100");
        assert_eq!(read("xmit_hash_policy"), "layer3+4");
        // eth1 is already a member: only eth0 is taken down and added.
        assert_eq!(downed, ["eth0"]);
        assert_eq!(read("slaves"), "+eth0");
        // bond0 existed: bonding_masters was not written.
        assert_eq!(
            std::fs::read_to_string(sys.join("class/net/bonding_masters")).unwrap(),
            ""
        );
    }

    #[test]
    fn without_the_driver_the_error_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let bond = Bond {
            members: vec!["eth0".into()],
            mode: "active-backup".into(),
            miimon: 100,
            xmit_hash_policy: None,
            lacp_rate: None,
        };
        let e = create(dir.path(), "bond0", &bond, &mut |_| Ok(())).unwrap_err();
        assert!(
            format!("{e:#}").contains("bonding driver is not loaded"),
            "{e:#}"
        );
    }
}
