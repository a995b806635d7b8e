//! The `usb-devices` inspection collector: IPA's `usb_devices`, one entry
//! per USB device under `/sys/bus/usb/devices` with IPA's keys (`product`,
//! `vendor`, `handle`, `""` when unknown) plus `serial`, `vendor_id` and
//! `product_id`.
//!
//! IPA takes the list from lshw (`handle` is lshw's `USB:<bus>:<device>`);
//! this reads the same attributes from sysfs. Hubs (root hubs included) are
//! left out, as lshw files them as buses; unlike lshw's `generic` class
//! filter, storage and input devices are listed too, since an operator asking
//! for USB devices wants the stick that is plugged in.

use std::path::Path;

use serde_json::{json, Value};

use crate::inventory::{read_attr, under};

/// USB class code of hubs (`bDeviceClass`).
const HUB_CLASS: &str = "09";

/// The list, sorted by bus and device number; `null` when the machine has
/// no USB bus at all (what IPA reports when lshw finds none).
pub fn devices(root: &Path) -> Value {
    let dir = under(root, "/sys/bus/usb/devices");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Value::Null;
    };
    let mut found: Vec<(u32, u32, Value)> = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        // `1-1:1.0` is an interface, not a device.
        if name.contains(':') {
            continue;
        }
        let p = e.path();
        let attr = |n: &str| read_attr(&p.join(n));
        if attr("bDeviceClass").as_deref() == Some(HUB_CLASS) {
            continue;
        }
        let num = |n: &str| attr(n).and_then(|v| v.parse::<u32>().ok());
        let (Some(bus), Some(dev)) = (num("busnum"), num("devnum")) else {
            continue;
        };
        found.push((
            bus,
            dev,
            json!({
                "product": attr("product").unwrap_or_default(),
                "vendor": attr("manufacturer").unwrap_or_default(),
                "handle": format!("USB:{bus}:{dev}"),
                "serial": attr("serial").unwrap_or_default(),
                "vendor_id": attr("idVendor").unwrap_or_default(),
                "product_id": attr("idProduct").unwrap_or_default(),
            }),
        ));
    }
    found.sort_by_key(|(b, d, _)| (*b, *d));
    Value::Array(found.into_iter().map(|(_, _, v)| v).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_without_hubs_and_interfaces() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(devices(dir.path()), Value::Null);
        let usb = dir.path().join("sys/bus/usb/devices");
        let dev = |name: &str, attrs: &[(&str, &str)]| {
            let d = usb.join(name);
            std::fs::create_dir_all(&d).unwrap();
            for (k, v) in attrs {
                std::fs::write(d.join(k), format!("{v}\n")).unwrap();
            }
        };
        dev(
            "usb1",
            &[("bDeviceClass", "09"), ("busnum", "1"), ("devnum", "1")],
        );
        dev("1-1:1.0", &[("bInterfaceClass", "08")]);
        dev(
            "1-1",
            &[
                ("bDeviceClass", "00"),
                ("busnum", "1"),
                ("devnum", "2"),
                ("product", "QEMU USB HARDDRIVE"),
                ("manufacturer", "QEMU"),
                ("serial", "1-0000:00:02.0-1"),
                ("idVendor", "46f4"),
                ("idProduct", "0001"),
            ],
        );
        assert_eq!(
            devices(dir.path()),
            json!([{
                "product": "QEMU USB HARDDRIVE", "vendor": "QEMU", "handle": "USB:1:2",
                "serial": "1-0000:00:02.0-1", "vendor_id": "46f4", "product_id": "0001",
            }])
        );
    }
}
