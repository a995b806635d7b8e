//! The agent's OCI image for OpenShift's `ironic-agent` unit
//! (agent/docs/container-form.md): one layer with the static agent at
//! `/usr/bin/agent`, the CA bundle, and the directories the unit mounts
//! into; entrypoint `agent container`. Written three ways under an output
//! directory, byte for byte the same from the same inputs (fixed times,
//! owners, modes and order; gzip without name or time; JSON with sorted
//! keys):
//!
//! - `oci/`: an OCI image layout (`skopeo copy oci:OUT/oci:latest …`
//!   pushes it); its `index.json` names the image `latest`, a manifest per
//!   architecture under one image index when there are several;
//! - `ironic-agent.oci.tar`: the same layout as an `oci-archive`;
//! - `ironic-agent.docker.tar`: the first architecture's image as a
//!   `docker-archive` (`podman load -i`), tagged `localhost/ironic-agent:latest`.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{json, Value};

use crate::arch::Arch;

/// The image's name (OpenShift's unit pulls `%REGISTRY%/ironic-agent`).
pub const NAME: &str = "ironic-agent";
/// The tag the layout and the archives carry.
pub const TAG: &str = "latest";
/// Where the agent is in the image.
pub const AGENT_PATH: &str = "usr/bin/agent";
/// The fixed creation time of every image (the epoch).
const CREATED: &str = "1970-01-01T00:00:00Z";

const MT_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MT_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const MT_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const MT_LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// One architecture's image: its static agent.
#[derive(Debug, Clone)]
pub struct Input {
    /// The architecture (checked against the binary).
    pub arch: Arch,
    /// The static agent binary.
    pub agent: PathBuf,
}

/// What was written.
#[derive(Debug, Clone)]
pub struct Report {
    /// Per architecture: name, manifest digest, compressed layer size.
    pub images: Vec<(String, String, u64)>,
    /// The `index.json` entry's digest (the tag's target).
    pub tag_digest: String,
    /// Sizes of the two archives.
    pub oci_archive_bytes: u64,
    /// The docker-archive's size (uncompressed layer).
    pub docker_archive_bytes: u64,
}

/// A content-addressed blob.
struct Blob {
    digest: String,
    bytes: Vec<u8>,
}

impl Blob {
    fn new(bytes: Vec<u8>) -> Self {
        Self {
            digest: sha256(&bytes),
            bytes,
        }
    }
    fn hex(&self) -> &str {
        self.digest.trim_start_matches("sha256:")
    }
    fn descriptor(&self, media_type: &str) -> Value {
        json!({"mediaType": media_type, "digest": self.digest, "size": self.bytes.len()})
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// Debian's and OCI's name of an architecture.
fn oci_arch(a: Arch) -> &'static str {
    match a {
        Arch::X86_64 => "amd64",
        Arch::Aarch64 => "arm64",
    }
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_mtime(0);
    h.set_uid(0);
    h.set_gid(0);
    h
}

/// Appends `path` (a directory when it ends with `/`) to `tar`.
fn append(tar: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32, data: &[u8]) -> Result<()> {
    let kind = if path.ends_with('/') {
        tar::EntryType::Directory
    } else {
        tar::EntryType::Regular
    };
    let mut h = header(kind, mode, data.len() as u64);
    tar.append_data(&mut h, path, data)
        .with_context(|| format!("adding {path} to the archive"))
}

/// The image's one layer, uncompressed: the directories OpenShift's unit
/// mounts into or the agent writes, the CA bundle when given, the agent.
pub fn layer(agent: &[u8], ca_bundle: Option<&[u8]>) -> Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    tar.mode(tar::HeaderMode::Deterministic);
    for dir in [
        "etc/",
        "etc/ironic-python-agent/",
        "etc/ssl/",
        "etc/ssl/certs/",
        "mnt/",
        "mnt/coreos/",
        "run/",
    ] {
        append(&mut tar, dir, 0o755, &[])?;
    }
    if let Some(ca) = ca_bundle {
        append(&mut tar, "etc/ssl/certs/ca-certificates.crt", 0o644, ca)?;
    }
    append(&mut tar, "tmp/", 0o1777, &[])?;
    for dir in ["usr/", "usr/bin/"] {
        append(&mut tar, dir, 0o755, &[])?;
    }
    append(&mut tar, AGENT_PATH, 0o755, agent)?;
    append(&mut tar, "var/", 0o755, &[])?;
    append(&mut tar, "var/tmp/", 0o1777, &[])?;
    tar.into_inner().context("finishing the layer")
}

/// gzip without a name or a time.
fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::default());
    gz.write_all(bytes)?;
    Ok(gz.finish()?)
}

/// The image configuration of an architecture's layer (`diff_id`: the
/// uncompressed layer's digest).
pub fn config(arch: Arch, diff_id: &str) -> Value {
    json!({
        "architecture": oci_arch(arch),
        "os": "linux",
        "created": CREATED,
        "config": {
            "Entrypoint": ["/usr/bin/agent", "container"],
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "WorkingDir": "/",
            "Labels": {
                "org.opencontainers.image.title": NAME,
                "org.opencontainers.image.description": "the deploy agent as OpenShift's ironic-agent container",
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": CREATED, "created_by": "image-builder oci"}],
    })
}

fn to_bytes(v: &Value) -> Vec<u8> {
    // serde_json's map keeps keys sorted: the same value, the same bytes.
    serde_json::to_vec(v).expect("a JSON value always serializes")
}

/// One architecture's blobs.
struct Image {
    arch: Arch,
    layer: Vec<u8>,
    layer_gz: Blob,
    config: Blob,
    manifest: Blob,
}

fn image(input: &Input, ca: Option<&[u8]>) -> Result<Image> {
    input.arch.check_elf(&input.agent)?;
    let agent = std::fs::read(&input.agent)
        .with_context(|| format!("reading {}", input.agent.display()))?;
    let layer = layer(&agent, ca)?;
    let layer_gz = Blob::new(gzip(&layer)?);
    let config = Blob::new(to_bytes(&config(input.arch, &sha256(&layer))));
    let manifest = Blob::new(to_bytes(&json!({
        "schemaVersion": 2,
        "mediaType": MT_MANIFEST,
        "config": config.descriptor(MT_CONFIG),
        "layers": [layer_gz.descriptor(MT_LAYER)],
    })));
    Ok(Image {
        arch: input.arch,
        layer,
        layer_gz,
        config,
        manifest,
    })
}

/// Writes the layout, the oci-archive and the docker-archive of `inputs`
/// (at least one; the first is the docker-archive's) into `out`.
pub fn write(out: &Path, inputs: &[Input], ca_bundle: Option<&Path>) -> Result<Report> {
    anyhow::ensure!(!inputs.is_empty(), "no agent binary given");
    let ca = ca_bundle
        .map(|p| std::fs::read(p).with_context(|| format!("reading {}", p.display())))
        .transpose()?;
    let images = inputs
        .iter()
        .map(|i| image(i, ca.as_deref()))
        .collect::<Result<Vec<_>>>()?;
    let platform = |a: Arch| json!({"architecture": oci_arch(a), "os": "linux"});
    let mut blobs: Vec<&Blob> = Vec::new();
    for i in &images {
        blobs.extend([&i.layer_gz, &i.config, &i.manifest]);
    }
    // One architecture: the tag names its manifest; several: an image
    // index of their manifests (what a registry serves as a manifest list).
    let list = (images.len() > 1).then(|| {
        let manifests: Vec<Value> = images
            .iter()
            .map(|i| {
                let mut d = i.manifest.descriptor(MT_MANIFEST);
                d["platform"] = platform(i.arch);
                d
            })
            .collect();
        Blob::new(to_bytes(&json!({
            "schemaVersion": 2, "mediaType": MT_INDEX, "manifests": manifests,
        })))
    });
    let mut tagged = match &list {
        Some(l) => l.descriptor(MT_INDEX),
        None => {
            let mut d = images[0].manifest.descriptor(MT_MANIFEST);
            d["platform"] = platform(images[0].arch);
            d
        }
    };
    tagged["annotations"] = json!({"org.opencontainers.image.ref.name": TAG});
    if let Some(l) = &list {
        blobs.push(l);
    }
    blobs.sort_by(|a, b| a.digest.cmp(&b.digest));
    blobs.dedup_by(|a, b| a.digest == b.digest);
    let index = to_bytes(&json!({
        "schemaVersion": 2, "mediaType": MT_INDEX, "manifests": [tagged.clone()],
    }));
    let layout = br#"{"imageLayoutVersion":"1.0.0"}"#;

    // The layout directory, written afresh.
    let dir = out.join("oci");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir.join("blobs/sha256"))?;
    std::fs::write(dir.join("oci-layout"), layout)?;
    std::fs::write(dir.join("index.json"), &index)?;
    for b in &blobs {
        std::fs::write(dir.join("blobs/sha256").join(b.hex()), &b.bytes)?;
    }

    // The same as an oci-archive.
    let mut tar = tar::Builder::new(Vec::new());
    tar.mode(tar::HeaderMode::Deterministic);
    append(&mut tar, "blobs/", 0o755, &[])?;
    append(&mut tar, "blobs/sha256/", 0o755, &[])?;
    for b in &blobs {
        append(
            &mut tar,
            &format!("blobs/sha256/{}", b.hex()),
            0o644,
            &b.bytes,
        )?;
    }
    append(&mut tar, "index.json", 0o644, &index)?;
    append(&mut tar, "oci-layout", 0o644, layout)?;
    let oci_archive = tar.into_inner()?;
    let oci_path = out.join(format!("{NAME}.oci.tar"));
    std::fs::write(&oci_path, &oci_archive)
        .with_context(|| format!("writing {}", oci_path.display()))?;

    // The first architecture as a docker-archive: uncompressed layer.
    let first = &images[0];
    let layer_hex = sha256(&first.layer)["sha256:".len()..].to_string();
    let manifest = to_bytes(&json!([{
        "Config": format!("{}.json", first.config.hex()),
        "RepoTags": [format!("localhost/{NAME}:{TAG}")],
        "Layers": [format!("{layer_hex}/layer.tar")],
    }]));
    let mut tar = tar::Builder::new(Vec::new());
    tar.mode(tar::HeaderMode::Deterministic);
    append(&mut tar, &format!("{layer_hex}/"), 0o755, &[])?;
    append(
        &mut tar,
        &format!("{layer_hex}/layer.tar"),
        0o644,
        &first.layer,
    )?;
    append(
        &mut tar,
        &format!("{}.json", first.config.hex()),
        0o644,
        &first.config.bytes,
    )?;
    append(&mut tar, "manifest.json", 0o644, &manifest)?;
    let docker_archive = tar.into_inner()?;
    let docker_path = out.join(format!("{NAME}.docker.tar"));
    std::fs::write(&docker_path, &docker_archive)
        .with_context(|| format!("writing {}", docker_path.display()))?;

    Ok(Report {
        images: images
            .iter()
            .map(|i| {
                (
                    i.arch.name().to_string(),
                    i.manifest.digest.clone(),
                    i.layer_gz.bytes.len() as u64,
                )
            })
            .collect(),
        tag_digest: tagged["digest"].as_str().unwrap_or_default().to_string(),
        oci_archive_bytes: oci_archive.len() as u64,
        docker_archive_bytes: docker_archive.len() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file that passes the ELF machine check (x86_64 or aarch64).
    fn fake_elf(dir: &Path, name: &str, machine: u16) -> PathBuf {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[18..20].copy_from_slice(&machine.to_le_bytes());
        b.extend_from_slice(name.as_bytes());
        let p = dir.join(name);
        std::fs::write(&p, b).unwrap();
        p
    }

    fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                if e.path().is_dir() {
                    stack.push(e.path());
                } else {
                    let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
                    out.push((rel, std::fs::read(e.path()).unwrap()));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn two_builds_are_byte_identical_and_the_layout_is_consistent() {
        let dir = tempfile::tempdir().unwrap();
        let x86 = fake_elf(dir.path(), "agent-x86", 62);
        let ca = dir.path().join("ca.crt");
        std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\n").unwrap();
        let inputs = [Input {
            arch: Arch::X86_64,
            agent: x86,
        }];
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        write(&a, &inputs, Some(&ca)).unwrap();
        let r = write(&b, &inputs, Some(&ca)).unwrap();
        assert_eq!(files(&a), files(&b), "the same inputs, the same bytes");
        // index.json → manifest → config and layer, each blob by its digest.
        let index: Value =
            serde_json::from_slice(&std::fs::read(a.join("oci/index.json")).unwrap()).unwrap();
        let m = &index["manifests"][0];
        assert_eq!(m["annotations"]["org.opencontainers.image.ref.name"], TAG);
        assert_eq!(m["digest"], r.tag_digest.as_str());
        let blob = |d: &str| {
            let bytes = std::fs::read(a.join("oci/blobs/sha256").join(&d[7..])).unwrap();
            assert_eq!(sha256(&bytes), d, "a blob is named by its digest");
            bytes
        };
        let manifest: Value = serde_json::from_slice(&blob(m["digest"].as_str().unwrap())).unwrap();
        let config: Value =
            serde_json::from_slice(&blob(manifest["config"]["digest"].as_str().unwrap())).unwrap();
        assert_eq!(
            config["config"]["Entrypoint"],
            json!(["/usr/bin/agent", "container"])
        );
        assert_eq!(config["architecture"], "amd64");
        let gz = blob(manifest["layers"][0]["digest"].as_str().unwrap());
        let mut layer = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut layer).unwrap();
        assert_eq!(config["rootfs"]["diff_ids"][0], sha256(&layer).as_str());
        let mut names = Vec::new();
        for e in tar::Archive::new(&layer[..]).entries().unwrap() {
            let e = e.unwrap();
            assert_eq!(
                (e.header().mtime().unwrap(), e.header().uid().unwrap()),
                (0, 0)
            );
            names.push(e.path().unwrap().display().to_string());
        }
        assert!(names.contains(&AGENT_PATH.to_string()), "{names:?}");
        assert!(names.contains(&"etc/ssl/certs/ca-certificates.crt".to_string()));
        // The docker-archive's manifest names its config and layer.
        let mut d =
            tar::Archive::new(std::fs::File::open(a.join("ironic-agent.docker.tar")).unwrap());
        let got: Vec<String> = d
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert!(got.contains(&"manifest.json".to_string()), "{got:?}");
        assert!(got.iter().any(|n| n.ends_with("/layer.tar")), "{got:?}");
    }

    #[test]
    fn two_architectures_share_one_index_and_a_wrong_binary_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let inputs = [
            Input {
                arch: Arch::X86_64,
                agent: fake_elf(dir.path(), "x", 62),
            },
            Input {
                arch: Arch::Aarch64,
                agent: fake_elf(dir.path(), "a", 183),
            },
        ];
        let r = write(dir.path(), &inputs, None).unwrap();
        assert_eq!(r.images.len(), 2);
        let index: Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("oci/index.json")).unwrap())
                .unwrap();
        assert_eq!(index["manifests"][0]["mediaType"], MT_INDEX);
        let list: Value = serde_json::from_slice(
            &std::fs::read(dir.path().join("oci/blobs/sha256").join(&r.tag_digest[7..])).unwrap(),
        )
        .unwrap();
        let arches: Vec<&str> = list["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["platform"]["architecture"].as_str().unwrap())
            .collect();
        assert_eq!(arches, ["amd64", "arm64"]);
        let wrong = [Input {
            arch: Arch::Aarch64,
            agent: fake_elf(dir.path(), "y", 62),
        }];
        let e = write(dir.path(), &wrong, None).unwrap_err();
        assert!(format!("{e:#}").contains("not aarch64"), "{e:#}");
    }
}
