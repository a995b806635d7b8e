//! `update_nvidia_nic_firmware_image` as IPA 13 runs it
//! (`update_nvidia_nic_firmware_image` and `NvidiaFirmwareImages`):
//! the list checked, the tools checked, each image's schema checked, the
//! NICs discovered, the images matched to them by PSID (one image per
//! PSID), then for each card (its first function with a matching image):
//! the image fetched, its checksum, PSID and version checked against what
//! the operator said, and burnt when the card's version differs. A card
//! whose previously burnt image is not running yet is reset first
//! (`mstfwreset`), as IPA does; the new image runs after the reboot the
//! step requests.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::Path;

use serde_json::{Map, Value};

use super::discovery::{discover, query_device, Nic};
use super::fetch::{download, Downloaded};
use super::query::parse_flint_query;
use super::tools::{run, Tools};
use super::NicFwError;
use crate::image::checksum::Algo;
use crate::image::fetch::HttpOptions;

/// The fields every image must have (IPA's schema).
const FIELDS: [&str; 5] = [
    "url",
    "checksum",
    "checksumType",
    "componentFlavor",
    "version",
];

/// One image as the operator describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FwImage {
    /// Its place in the list, for messages.
    pub index: usize,
    /// Where it is (`file://`, `http://`, `https://`).
    pub url: String,
    /// Its expected digest.
    pub checksum: String,
    /// `sha256`, `sha512` (`md5` when the conductor allows it).
    pub algo: Algo,
    /// The PSID it is for.
    pub psid: String,
    /// Its firmware version.
    pub version: String,
}

/// What the step needs besides its argument.
#[derive(Debug, Clone)]
pub struct Env<'a> {
    /// Where the tools are looked for.
    pub search_path: &'a OsStr,
    /// The agent's download settings.
    pub http: &'a HttpOptions,
    /// Whether MD5 checksums are allowed (the conductor's
    /// `agent_md5_checksum_enable`, IPA's `md5_enabled`).
    pub md5_allowed: bool,
    /// Where images are downloaded to.
    pub scratch: &'a Path,
}

/// What the step did to each card.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Cards burnt, by their first function's address.
    pub burnt: Vec<String>,
    /// Cards already at the image's version.
    pub current: Vec<String>,
}

/// Runs the step on `images` (the step's argument as sent).
pub fn update(images: &Value, env: &Env<'_>) -> Result<Outcome, NicFwError> {
    let Value::Array(list) = images else {
        return Err(NicFwError::InvalidImageConfig(format!(
            "The images must be a list of images, {images}"
        )));
    };
    let tools = Tools::find(env.search_path)?;
    let images = list
        .iter()
        .enumerate()
        .map(|(i, v)| check_image(i, v, env.md5_allowed))
        .collect::<Result<Vec<_>, _>>()?;
    let nics = discover(&tools)?;
    let psids: BTreeSet<&str> = nics.iter().filter_map(|n| n.fw.psid.as_deref()).collect();
    let by_psid = filter_images(&images, &psids)?;
    let mut outcome = Outcome::default();
    let mut seen_cards = BTreeSet::new();
    let mut fetched: BTreeMap<usize, Downloaded> = BTreeMap::new();
    for nic in &nics {
        let Some(image) = nic.fw.psid.as_deref().and_then(|p| by_psid.get(p)) else {
            continue;
        };
        if !seen_cards.insert(nic.card().to_string()) {
            continue;
        }
        let file = match fetched.entry(image.index) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(fetch_checked(&tools, image, env)?),
        };
        if update_if_needed(&tools, nic, image, &file.path)? {
            outcome.burnt.push(nic.pci.clone());
        } else {
            outcome.current.push(nic.pci.clone());
        }
    }
    Ok(outcome)
}

/// IPA's `validate_images_schema` for image `index`.
pub fn check_image(index: usize, v: &Value, md5_allowed: bool) -> Result<FwImage, NicFwError> {
    let empty = Map::new();
    let obj = v.as_object().unwrap_or(&empty);
    let field = |k: &str| obj.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    let missing: Vec<&str> = FIELDS
        .iter()
        .copied()
        .filter(|k| field(k).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(NicFwError::InvalidImageConfig(format!(
            "Invalid parameters for image {index} ({v}): please provide the following parameters url, checksum, checksumType, componentFlavor, version as non-empty strings; missing or invalid: {}",
            missing.join(", ")
        )));
    }
    let (url, kind) = (
        field("url").unwrap_or_default(),
        field("checksumType").unwrap_or_default(),
    );
    let algo = match kind {
        "sha256" => Algo::Sha256,
        "sha512" => Algo::Sha512,
        "md5" if md5_allowed => {
            tracing::warn!(url, "Use of MD5 checksum is deprecated for firmware image validation. Please use sha256 or sha512.");
            Algo::Md5
        }
        other => {
            return Err(NicFwError::InvalidImageConfig(format!(
                "Checksum algorithm {other} is not supported for image {index} ({url}). Supported algorithms are: sha256, sha512"
            )))
        }
    };
    Ok(FwImage {
        index,
        url: url.to_string(),
        checksum: field("checksum").unwrap_or_default().to_string(),
        algo,
        psid: field("componentFlavor").unwrap_or_default().to_string(),
        version: field("version").unwrap_or_default().to_string(),
    })
}

/// The image for each PSID present (IPA's `filter_images`): two images for
/// one present PSID are IPA's `DuplicateComponentFlavor`.
pub fn filter_images<'a>(
    images: &'a [FwImage],
    psids: &BTreeSet<&str>,
) -> Result<BTreeMap<String, &'a FwImage>, NicFwError> {
    let mut out: BTreeMap<String, &FwImage> = BTreeMap::new();
    for image in images {
        if !psids.contains(image.psid.as_str()) {
            tracing::info!(
                psid = image.psid,
                url = image.url,
                "Image with component Flavor {} does not match any NIC in the system",
                image.psid
            );
            continue;
        }
        if let Some(first) = out.get(&image.psid) {
            return Err(NicFwError::DuplicateComponentFlavor(format!(
                "Duplicate componentFlavor {} (images {} and {})",
                image.psid, first.index, image.index
            )));
        }
        out.insert(image.psid.clone(), image);
    }
    Ok(out)
}

/// The image fetched and checked against the operator's checksum, PSID
/// and version (IPA's `NvidiaNicFirmwareBinary`).
fn fetch_checked(tools: &Tools, image: &FwImage, env: &Env<'_>) -> Result<Downloaded, NicFwError> {
    let mut http = env.http.clone();
    // IPA fetches firmware with a plain urlopen: no image server
    // credentials go to the firmware's host.
    http.authorization = None;
    let file = download(&image.url, image.algo, &http, env.scratch)?;
    if file.digest != image.checksum {
        return Err(NicFwError::MismatchChecksum(format!(
            "Mismatch provided checksum {} for image {} ({}): its {} is {}",
            image.checksum,
            image.index,
            image.url,
            image.algo.name(),
            file.digest
        )));
    }
    let path = file.path.to_string_lossy().into_owned();
    let out = run(
        &tools.mstflint,
        &["-i", &path, "query"],
        &format!("querying firmware image {} ({})", image.index, image.url),
    )?;
    let info = parse_flint_query(&out);
    if info.psid.as_deref() != Some(image.psid.as_str()) {
        return Err(NicFwError::MismatchComponentFlavor(format!(
            "The provided psid {} does not match the image psid {} of image {} ({})",
            image.psid,
            info.psid.as_deref().unwrap_or("(none reported)"),
            image.index,
            image.url
        )));
    }
    if info.fw_ver.as_deref() != Some(image.version.as_str()) {
        return Err(NicFwError::MismatchFwVersion(format!(
            "The provided firmware version {} does not match image firmware version {} of image {} ({})",
            image.version,
            info.fw_ver.as_deref().unwrap_or("(none reported)"),
            image.index,
            image.url
        )));
    }
    Ok(file)
}

/// IPA's `fw_update_if_needed`: burns `path` on `nic` when its version is
/// not the image's (a pending image reset first). True when it burnt.
fn update_if_needed(
    tools: &Tools,
    nic: &Nic,
    image: &FwImage,
    path: &Path,
) -> Result<bool, NicFwError> {
    let now = query_device(tools, &nic.pci)?;
    let Some(current) = now.fw_ver.as_deref() else {
        return Err(NicFwError::Output(format!(
            "`mstflint -d {} -qq query` reported no FW Version",
            nic.pci
        )));
    };
    tracing::info!(
        device = nic.pci,
        current,
        image = image.version,
        "Device firmware version: {current}, image firmware version: {}",
        image.version
    );
    if current == image.version {
        tracing::info!(
            device = nic.pci,
            "Firmware update is not required for the device"
        );
        return Ok(false);
    }
    if now.running_fw_ver.is_some() {
        reset(tools, &nic.pci)?;
    }
    let image_path = path.to_string_lossy();
    tracing::info!(device = nic.pci, image = %image_path, "Updating the firmware image");
    run(
        &tools.mstflint,
        &["-d", &nic.pci, "-i", &image_path, "-y", "burn"],
        &format!(
            "burning image {} ({}) on device {}",
            image.index, image.url, nic.pci
        ),
    )?;
    tracing::info!(device = nic.pci, "Firmware image successfully updated");
    Ok(true)
}

/// `mstfwreset -d PCI -y --sync 1 reset`: the card loads its burnt image.
pub fn reset(tools: &Tools, pci: &str) -> Result<(), NicFwError> {
    tracing::info!(device = pci, "Performing firmware reset");
    run(
        &tools.mstfwreset,
        &["-d", pci, "-y", "--sync", "1", "reset"],
        &format!("resetting device {pci}"),
    )?;
    tracing::info!(device = pci, "Firmware successfully reset");
    Ok(())
}
