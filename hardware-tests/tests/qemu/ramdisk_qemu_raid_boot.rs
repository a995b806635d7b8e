//! A whole-disk image deployed onto a software RAID-1 boots from either
//! disk under UEFI. The deploy ramdisk (OVMF, direct kernel boot, two
//! virtio disks) is driven by the test conductor as Ironic drives it: a
//! manual clean with `delete_configuration` + `create_configuration`
//! (RAID-1 `root`, 1 GiB, and the mirrored ESP); a second boot of the
//! ramdisk assembles the arrays at init, and Ironic's `direct` deploy
//! writes the bootable test image onto `/dev/md0` (root device hint
//! `name`), `install_bootloader` copies the image's ESP onto the mirrored
//! ESP and writes a boot entry per member into the machine's NVRAM; the
//! agent powers off. The machine then boots from its disks with both
//! attached and with each one alone (same NVRAM), and each time the
//! deployed system prints its marker, started by the entry of a disk that
//! is there. About 90 s. (The test system's initramfs does
//! not assemble md, so it cannot see the config drive inside the array.)
//! BIOS is not covered: it needs GRUB installed from the image on each
//! member, which the agent does not do.

use std::time::{Duration, Instant};

use agent::testconductor::{BootMode, DeployRequest, ImageInfo, Settings, TestConductor};
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::bed::deploy;
use hardware_tests::bed::{
    self, Boot, Bus, Disk, Firmware, Net, NetOptions, Nic, Vm, VmSpec, BRIDGE_IP,
};
use hardware_tests::require_root;
use hardware_tests::testimage;
use serde_json::json;

const MAC: &str = "52:54:00:12:34:5a";
const MIB: u64 = 1 << 20;

#[test]
fn uefi_mirror_boots_from_either_disk() {
    require_root("the QEMU software RAID boot test");
    let started = Instant::now();
    let ramdisk = bed::ramdisk_dir().unwrap();
    let marker = format!("raid-{:016x}", fastrand::u64(..));
    let img = testimage::build(
        &hardware_tests::repo_root().join("target/raid-boot-image"),
        &marker,
    )
    .expect("building the test image");
    let sha = deploy::sha256_file(&img.raw).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let vars = tmp.path().join("OVMF_VARS.fd");
    let disks: Vec<Disk> = ["RAIDBOOT1", "RAIDBOOT2"]
        .iter()
        .map(|serial| Disk {
            path: tmp.path().join(format!("{serial}.img")),
            size: 1700 * MIB,
            bus: Bus::Virtio,
            serial: serial.to_string(),
            model: None,
        })
        .collect();
    let mut opts = NetOptions::pxe("raidboot", &ramdisk, "");
    opts.ramdisk = None;
    let net = Net::start(opts).unwrap();
    let spec = |name: &str, disks: Vec<Disk>, boot: Boot| {
        let mut s = VmSpec::new(name);
        s.firmware = Firmware::Uefi { vars: vars.clone() };
        s.nics.push(Nic { mac: MAC.into() });
        s.disks = disks;
        s.boot = boot;
        s
    };
    let direct = Boot::Direct {
        kernel: ramdisk.join("deploy.kernel"),
        initrd: ramdisk.join("deploy.initramfs"),
        append: format!(
            "console=ttyS0 quiet panic=-1 BOOTIF=01-{} ipa-api-url=http://{BRIDGE_IP}:6385",
            MAC.replace(':', "-")
        ),
    };
    let workdir = tmp.path().to_path_buf();
    let outcome = net.block_on(async {
        let settings = Settings {
            command_poll_interval: Duration::from_secs(2),
            ..Settings::default()
        };
        let conductor =
            TestConductor::start_on(settings, format!("{BRIDGE_IP}:6385").parse()?).await?;
        let server = ImageServer::start_on(format!("{BRIDGE_IP}:0").parse()?)?;
        server.route("/images/testimage.raw", &img.raw, &[], Fault::None);
        let uuid = conductor.enroll(&[MAC]);
        conductor.update_node(&uuid, |n| {
            n.target_raid_config = json!({"logical_disks": [
                {"controller": "software", "raid_level": "1", "size_gb": 1, "volume_name": "root",
                 "is_root_volume": true}]});
        });
        let step = |name: &str| json!({"interface": "raid", "step": name, "args": {}});
        conductor.start_clean(
            &uuid,
            Some(vec![
                step("delete_configuration"),
                step("create_configuration"),
            ]),
        )?;
        let mut vm = Vm::start(&net, &spec("clean", disks.clone(), direct.clone()))?;
        let cleaned = conductor
            .wait_for_state(&uuid, "manageable", Duration::from_secs(300))
            .await;
        let clean_console = vm.console();
        vm.kill();
        drop(vm);
        cleaned.map_err(|e| anyhow::anyhow!("{e:#}\n--- clean console ---\n{clean_console}"))?;
        println!("{:>5.1} s RAID built", started.elapsed().as_secs_f64());

        conductor.make_available(&uuid)?;
        let configdrive = deploy::config_drive(&workdir, &json!({"uuid": "raid-boot"}))?;
        conductor.start_deploy(
            &uuid,
            DeployRequest {
                image_info: ImageInfo::raw_sha256(&server.url("/images/testimage.raw"), &sha),
                configdrive: Some(configdrive),
                boot_mode: BootMode::Uefi,
                root_device: Some(json!({"name": "/dev/md0"})),
            },
        )?;
        let mut vm = Vm::start(&net, &spec("deploy", disks.clone(), direct.clone()))?;
        let node = deploy::watch_deploy(
            &conductor,
            &uuid,
            &["active"],
            Duration::from_secs(420),
            |_| {},
        )
        .await;
        let exited = tokio::task::block_in_place(|| vm.wait_exit(Duration::from_secs(120)));
        let deploy_console = vm.console();
        vm.kill();
        drop(vm);
        let node =
            node.map_err(|e| anyhow::anyhow!("{e:#}\n--- deploy console ---\n{deploy_console}"))?;
        anyhow::ensure!(
            node.provision_state == "active",
            "deploy ended {}: {:?}\n{deploy_console}",
            node.provision_state,
            node.last_error
        );
        exited.map_err(|e| anyhow::anyhow!("the agent did not power off: {e:#}"))?;
        println!(
            "{:>5.1} s deployed onto /dev/md0",
            started.elapsed().as_secs_f64()
        );

        let mut boots = Vec::new();
        for (label, which) in [
            ("both", vec![0, 1]),
            ("second-only", vec![1]),
            ("first-only", vec![0]),
        ] {
            let attached: Vec<Disk> = which.iter().map(|&i| disks[i].clone()).collect();
            let mut vm = Vm::start(&net, &spec(&format!("disk-{label}"), attached, Boot::Disk))?;
            let r = tokio::task::block_in_place(|| {
                deploy::wait_booted(
                    &mut vm,
                    &testimage::marker_line(&marker),
                    Duration::from_secs(240),
                )
            });
            println!(
                "{:>5.1} s boot with {label}: {r:?}",
                started.elapsed().as_secs_f64()
            );
            boots.push((label, r.map_err(|e| format!("{e:#}")), vm.console()));
            vm.kill();
        }
        anyhow::Ok((deploy_console, boots, conductor.transcript()))
    });
    let (deploy_console, boots, transcript) = outcome
        .unwrap()
        .unwrap_or_else(|e| panic!("{e:#} (consoles in {})", net.logs.display()));
    let ctx = format!(
        "\n--- transcript ---\n{}\n--- logs: {} ---",
        transcript.join("\n"),
        net.logs.display()
    );
    assert!(
        deploy_console.contains("raid: /dev/md0 assembled"),
        "the second ramdisk boot did not assemble md0\n{deploy_console}{ctx}"
    );
    for (label, r, console) in &boots {
        assert!(
            r.is_ok(),
            "boot with {label} disk(s) failed: {r:?}\n--- console ---\n{console}{ctx}"
        );
        // OVMF starts the member's own entry (the first disk's while it is
        // there, the second's when it is alone).
        let entry = deploy::uefi_boot_entry(console).unwrap_or_default();
        println!("{label}: {entry}");
        let disk = if *label == "second-only" {
            "/dev/vdb"
        } else {
            "/dev/vda"
        };
        assert!(
            entry.contains(&format!("\"ironic1 ({disk})\"")),
            "boot with {label}: not the entry of {disk}: {entry:?}{ctx}"
        );
    }
}
