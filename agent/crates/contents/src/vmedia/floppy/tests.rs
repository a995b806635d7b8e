//! The floppy reader on images made as Ironic makes them (`mkfs.vfat -n
//! ir-vfd-dev` on 100 KiB, then the file copied in: the fuzz seed, made by
//! `make-corpus.sh`) or by fatfs in memory, and on crafted ones: looping
//! and broken cluster chains, FAT32, exFAT, over-size devices, mutations.

use std::io::{Cursor, Read, Seek, SeekFrom, Write};

use fatfs::{FatType, FileSystem, FormatVolumeOptions, FsOptions};

use super::fat::{Kind, Volume};
use super::*;

/// The seed `make-corpus.sh` makes with mkfs.vfat and mcopy.
const IRONIC: &[u8] = include_bytes!("../../../../../fuzz/corpus/floppy/ironic-100k");

/// Its `parameters.txt`.
const PARAMS: &str =
    "ipa-api-url=http://192.0.2.1:6385\nboot_method=vmedia\nipa-global-request-id=req-1";

const LABEL: &[u8; 11] = b"ir-vfd-dev ";

/// A FAT volume of `bytes` bytes made by fatfs, with `parameters.txt`.
fn image(bytes: usize, label: &[u8; 11], fat: Option<FatType>, text: &[u8]) -> Vec<u8> {
    let mut img = Cursor::new(vec![0u8; bytes]);
    format(&mut img, label, fat);
    write_parameters(&mut img, text);
    img.into_inner()
}

fn format<T: Read + Write + Seek>(img: &mut T, label: &[u8; 11], fat: Option<FatType>) {
    let mut opts = FormatVolumeOptions::new()
        .volume_label(*label)
        .bytes_per_cluster(512);
    if let Some(f) = fat {
        opts = opts.fat_type(f);
    }
    fatfs::format_volume(&mut *img, opts).unwrap();
}

fn write_parameters<T: Read + Write + Seek>(img: &mut T, text: &[u8]) {
    let fs = FileSystem::new(&mut *img, FsOptions::new()).unwrap();
    let mut f = fs.root_dir().create_file("parameters.txt").unwrap();
    f.write_all(text).unwrap();
}

fn u16_at(img: &[u8], at: usize) -> usize {
    usize::from(u16::from_le_bytes([img[at], img[at + 1]]))
}

/// (FAT offset, root directory offset) of a FAT12/16 image.
fn layout(img: &[u8]) -> (usize, usize) {
    let bps = u16_at(img, 11);
    let fat = u16_at(img, 14) * bps;
    (fat, fat + usize::from(img[16]) * u16_at(img, 22) * bps)
}

/// The offset of `parameters.txt`'s short entry (`PARAME~1TXT`).
fn short_entry(img: &[u8]) -> usize {
    let (_, root) = layout(img);
    (root..root + 512 * 32)
        .step_by(32)
        .find(|&e| img[e..].starts_with(b"PARAME~1TXT"))
        .unwrap()
}

fn first_cluster(img: &[u8]) -> usize {
    u16_at(img, short_entry(img) + 26)
}

/// Sets FAT entry `n` (both FATs are not needed: the first is read).
fn set_fat(img: &mut [u8], kind: Kind, n: usize, v: u16) {
    let (fat, _) = layout(img);
    match kind {
        Kind::Fat16 => img[fat + 2 * n..fat + 2 * n + 2].copy_from_slice(&v.to_le_bytes()),
        Kind::Fat12 => {
            let at = fat + n + n / 2;
            if n % 2 == 1 {
                img[at] = (img[at] & 0x0f) | ((v & 0xf) << 4) as u8;
                img[at + 1] = (v >> 4) as u8;
            } else {
                img[at] = v as u8;
                img[at + 1] = (img[at + 1] & 0xf0) | ((v >> 8) & 0xf) as u8;
            }
        }
    }
}

fn kind_of(img: &[u8]) -> Kind {
    Volume::parse(img).unwrap().kind
}

#[test]
fn ironics_floppy_gives_its_parameters() {
    assert_eq!(kind_of(IRONIC), Kind::Fat12);
    assert_eq!(parameters(IRONIC).as_deref(), Ok(PARAMS));
    assert_eq!(read_device(&mut Cursor::new(IRONIC)).as_deref(), Ok(PARAMS));
    // The same from fatfs (label in the boot sector only), FAT12 and FAT16.
    let fat12 = image(100 << 10, LABEL, None, PARAMS.as_bytes());
    assert_eq!(kind_of(&fat12), Kind::Fat12);
    assert_eq!(parameters(&fat12).as_deref(), Ok(PARAMS));
    let long = "ipa-debug=1\n".repeat(400);
    let fat16 = image(8 << 20, LABEL, Some(FatType::Fat16), long.as_bytes());
    assert_eq!(kind_of(&fat16), Kind::Fat16);
    assert_eq!(parameters(&fat16), Ok(long));
    // The root directory's label counts when the boot sector has another.
    let mut relabelled = IRONIC.to_vec();
    relabelled[43..54].copy_from_slice(b"NO NAME    ");
    assert_eq!(parameters(&relabelled).as_deref(), Ok(PARAMS));
}

#[test]
fn other_media_are_not_the_floppy() {
    let other = parameters(&image(100 << 10, b"OTHER      ", None, b"x=1"));
    assert_eq!(other, Err(Refusal::OtherLabel("OTHER".into())));
    assert_eq!(parameters(&[0; 4096]), Err(Refusal::NotFat));
    assert_eq!(parameters(&IRONIC[..100]), Err(Refusal::NotFat));
    assert!(other.unwrap_err().is_other_media());
    // A long name whose checksum does not fit its short entry is not read.
    let mut img = IRONIC.to_vec();
    let long = short_entry(&img) - 32;
    img[long + 13] ^= 1;
    assert_eq!(parameters(&img), Err(Refusal::NoParameters));
    assert!(!Refusal::NoParameters.is_other_media());
}

/// A 3000-byte `parameters.txt` over 512-byte clusters (six of them,
/// consecutive from its first, `c`) with FAT entries changed by `patch`;
/// the result and `c`.
fn patched(kind: Kind, patch: impl Fn(&mut [u8], usize)) -> (Result<String, Refusal>, u32) {
    let text = "k=v\n".repeat(750);
    let (bytes, fat) = match kind {
        Kind::Fat12 => (1 << 20, FatType::Fat12),
        Kind::Fat16 => (8 << 20, FatType::Fat16),
    };
    let mut img = image(bytes, LABEL, Some(fat), text.as_bytes());
    assert_eq!(kind_of(&img), kind);
    assert_eq!(parameters(&img).as_deref(), Ok(text.as_str()));
    let first = first_cluster(&img);
    patch(&mut img, first);
    (parameters(&img), first as u32)
}

#[test]
fn a_looping_parameters_chain_is_refused() {
    for kind in [Kind::Fat12, Kind::Fat16] {
        let set = |img: &mut [u8], n, v: usize| set_fat(img, kind, n, v as u16);
        // Back from the third cluster to the second, within the file.
        let (r, c) = patched(kind, |img, c| set(img, c + 2, c + 1));
        assert_eq!(r, Err(Refusal::Loop(c + 1)), "{kind:?}");
        // The first cluster to itself.
        let (r, c) = patched(kind, |img, c| set(img, c, c));
        assert_eq!(r, Err(Refusal::Loop(c)), "{kind:?}");
        // The last cluster back to the first: past the file's bytes, the
        // chain is still walked to its end.
        let (r, c) = patched(kind, |img, c| set(img, c + 5, c));
        assert_eq!(r, Err(Refusal::Loop(c)), "{kind:?}");
    }
}

#[test]
fn broken_chains_are_refused() {
    for kind in [Kind::Fat12, Kind::Fat16] {
        let set = |img: &mut [u8], n, v: u16| set_fat(img, kind, n, v);
        let (eoc, bad, beyond) = match kind {
            Kind::Fat12 => (0xfff, 0xff7, 0xff0),
            Kind::Fat16 => (0xffff, 0xfff7, 0xfff0),
        };
        let chain = |why: String| Err(Refusal::BadChain(why));
        let (r, _) = patched(kind, |img, c| set(img, c + 1, eoc));
        assert_eq!(r, chain("ends after 1024 of its 3000 bytes".into()));
        let (r, c) = patched(kind, |img, c| set(img, c + 1, 0));
        assert_eq!(r, chain(format!("passes cluster {}, marked free", c + 1)));
        let (r, c) = patched(kind, |img, c| set(img, c, bad));
        assert_eq!(r, chain(format!("passes cluster {c}, marked bad")));
        let (r, _) = patched(kind, |img, c| set(img, c, beyond));
        let Err(Refusal::BadChain(out)) = r else {
            panic!("{r:?}")
        };
        assert!(
            out.starts_with(&format!("points to cluster {beyond}, outside 2..")),
            "{out}"
        );
    }
}

/// A small FAT32 volume (boot sector fields by hand, as fatfs will not
/// make FAT32 below 65525 clusters) whose root directory's chain is
/// cluster 2 pointing to itself: fatfs 0.3 follows such a chain forever.
fn fat32_looping_root(label: &[u8; 11]) -> Vec<u8> {
    let mut img = vec![0u8; 1 << 20];
    img[..3].copy_from_slice(&[0xeb, 0x58, 0x90]);
    img[3..11].copy_from_slice(b"mkfs.fat");
    img[11..13].copy_from_slice(&512u16.to_le_bytes());
    img[13] = 1; // sectors per cluster
    img[14..16].copy_from_slice(&32u16.to_le_bytes()); // reserved
    img[16] = 2; // FATs; root entries and 16-bit sizes stay 0
    img[21] = 0xf8;
    img[32..36].copy_from_slice(&2048u32.to_le_bytes());
    img[36..40].copy_from_slice(&16u32.to_le_bytes()); // FAT sectors
    img[44..48].copy_from_slice(&2u32.to_le_bytes()); // root cluster
    img[66] = 0x29;
    img[71..82].copy_from_slice(label);
    img[82..90].copy_from_slice(b"FAT32   ");
    img[510..512].copy_from_slice(&[0x55, 0xaa]);
    let fat = 32 * 512;
    img[fat..fat + 12]
        .copy_from_slice(&[0xf8, 0xff, 0xff, 0x0f, 0xff, 0xff, 0xff, 0x0f, 2, 0, 0, 0]);
    img
}

#[test]
fn fat32_and_exfat_are_refused_before_any_walk() {
    let img = fat32_looping_root(LABEL);
    assert_eq!(parameters(&img), Err(Refusal::Fat32));
    assert_eq!(read_device(&mut Cursor::new(&img)), Err(Refusal::Fat32));
    assert!(!Refusal::Fat32.is_other_media());
    let other = parameters(&fat32_looping_root(b"DATA       "));
    assert_eq!(other, Err(Refusal::OtherLabel("DATA".into())));
    let mut exfat = vec![0u8; 1 << 20];
    exfat[3..11].copy_from_slice(b"EXFAT   ");
    assert_eq!(read_device(&mut Cursor::new(&exfat)), Err(Refusal::ExFat));
    assert!(!Refusal::ExFat.is_other_media());
}

/// A device that counts the bytes read from it.
struct Counted<T> {
    inner: T,
    read: u64,
}

impl<T: Read> Read for Counted<T> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

impl<T: Seek> Seek for Counted<T> {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(pos)
    }
}

#[test]
fn an_over_size_device_is_refused_after_its_first_sector() {
    let dir = tempfile::tempdir().unwrap();
    // A real FAT32 floppy of 40 MiB (sparse) whose root chain loops.
    let path = dir.path().join("fat32");
    let mut f = std::fs::File::create_new(&path).unwrap();
    f.set_len(40 << 20).unwrap();
    format(&mut f, LABEL, Some(FatType::Fat32));
    let mut img = vec![0u8; 64 << 10];
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_exact(&mut img).unwrap();
    let (fat, root) = (u16_at(&img, 14) * 512, u16_at(&img, 44));
    f.seek(SeekFrom::Start((fat + 4 * root) as u64)).unwrap();
    f.write_all(&(root as u32).to_le_bytes()).unwrap();
    let mut dev = Counted {
        inner: std::fs::File::open(&path).unwrap(),
        read: 0,
    };
    assert_eq!(read_device(&mut dev), Err(Refusal::TooLarge(40 << 20)));
    assert_eq!(dev.read, 512);
    // FAT16 with a good parameters.txt, just over the bound.
    let big = image(17 << 20, LABEL, Some(FatType::Fat16), b"x=1");
    assert_eq!(parameters(&big), Err(Refusal::TooLarge(17 << 20)));
    let mut dev = Counted {
        inner: Cursor::new(&big),
        read: 0,
    };
    assert_eq!(read_device(&mut dev), Err(Refusal::TooLarge(17 << 20)));
    assert_eq!(dev.read, 512);
    // Unlabelled, it is just another disk.
    let other = image(17 << 20, b"DATA       ", Some(FatType::Fat16), b"x=1");
    assert!(parameters(&other).unwrap_err().is_other_media());
    // At the bound it is read.
    let at = image(16 << 20, LABEL, Some(FatType::Fat16), b"x=1");
    assert_eq!(read_device(&mut Cursor::new(&at)).as_deref(), Ok("x=1"));
}

#[test]
fn malformed_volumes_and_files_are_refused() {
    let malformed = |r: Result<String, Refusal>| match r {
        Err(Refusal::Malformed(why)) => why,
        other => panic!("{other:?}"),
    };
    // The device is shorter than the volume.
    let why = malformed(parameters(&IRONIC[..50 << 10]));
    assert_eq!(why, "the volume claims 98304 bytes, the device has 51200");
    // FAT16's FATs cut to one sector each: far too small for its clusters.
    let mut img = image(8 << 20, LABEL, Some(FatType::Fat16), b"x=1");
    img[22..24].copy_from_slice(&1u16.to_le_bytes());
    let why = malformed(parameters(&img));
    assert!(why.starts_with("a FAT of 512 bytes cannot map "), "{why}");
    // Root directory entries beyond the volume.
    let mut img = IRONIC.to_vec();
    img[17..19].copy_from_slice(&0xfff0u16.to_le_bytes());
    let why = malformed(parameters(&img));
    assert_eq!(why, "its FATs and root directory overrun the volume");
    // The same, unlabelled: not the floppy, no warning.
    img[43..54].copy_from_slice(b"NO NAME    ");
    assert!(parameters(&img).unwrap_err().is_other_media());

    let entry = short_entry(IRONIC);
    let mut img = IRONIC.to_vec();
    img[entry + 28..entry + 32].copy_from_slice(&(2u32 << 20).to_le_bytes());
    assert_eq!(parameters(&img), Err(Refusal::FileTooLarge(2 << 20)));
    let mut img = IRONIC.to_vec();
    let data = 0x600 + 512 * 32;
    img[data] = 0xff;
    assert_eq!(parameters(&img), Err(Refusal::NotText));
}

#[test]
fn mutated_images_are_never_a_panic() {
    // Each byte of the boot sector, FATs and root directory set to a few
    // values, then a run of pseudo-random images and truncations.
    for at in 0..0x700 {
        for v in [0x00, 0x01, 0x0f, 0x80, 0xf7, 0xff] {
            let mut img = IRONIC.to_vec();
            img[at] = v;
            let _ = parameters(&img);
        }
    }
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..2000 {
        let mut img = IRONIC.to_vec();
        for _ in 0..8 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let at = (seed as usize) % 0x700;
            img[at] = (seed >> 32) as u8;
        }
        let _ = parameters(&img);
        let _ = parameters(&img[..(seed >> 40) as usize % img.len()]);
    }
}
