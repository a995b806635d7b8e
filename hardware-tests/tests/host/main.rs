//! The suites that run on this machine without a guest: the agent in host
//! mode against real Ironic 39 and the bed's BMC, on loop devices, in
//! network namespaces, with real podman, crun and coreos-installer. One
//! module per suite, one test binary for all. Run one suite (most as root)
//! from `hardware-tests/`: `cargo test -p hardware-tests --test host --
//! NAME::` (`ci/test-jobs` runs each suite as a job of its own, by its
//! tests' exact names).

mod burnin_pairing_etcd;
mod configdrive_4kn_loop;
mod container_form;
mod container_registry_loop;
mod coreos_install_loop;
mod coreos_installer_loop;
mod dhcp_netns;
mod erase_cli_loop;
mod erase_loop;
mod faults_conductor;
mod faults_image_server;
mod fleet_real_ironic;
mod ignition_loop;
mod image_proxy;
mod image_to_loop;
mod inject_files_loop;
mod lldp_netns;
mod managers_staging;
mod mdns_netns;
mod partition_image_loop;
mod partition_prep_loop;
mod partition_uuids_loop;
mod qcow2_corpus;
mod raid_loop;
mod real_ironic_clean;
mod real_ironic_container_steps;
mod real_ironic_deploy;
mod real_ironic_erase;
mod real_ironic_exec_steps;
mod real_ironic_inspect;
mod real_ironic_metrics;
mod real_ironic_own_tls;
mod real_ironic_partition_deploy;
mod real_ironic_raid;
mod real_ironic_rescue;
mod real_ironic_service;
mod real_ironic_skip_devices;
mod redfish_bmc;
mod soak_real_ironic;
mod standby_loop;
mod udev_busy_loop;
mod unmount_busy_loop;
