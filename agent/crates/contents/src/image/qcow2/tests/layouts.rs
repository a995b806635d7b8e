//! Layouts built on purpose ([`super::super::test_layout`]): data long
//! before the L2 table that maps it, tables at the end of the file, clusters
//! in reverse guest order, compressed packs and subclusters, and random
//! permutations of all pieces. Each image passes `qemu-img check`, and the
//! conversion (with no lookahead, so everything behind is read again) equals
//! `qemu-img convert -O raw`.

use super::super::test_layout::{Content, Layout, Piece};
use super::*;

/// Writes `img`, checks it with qemu-img and returns qemu-img's raw output.
fn qemu_reference(img: &[u8], what: &str) -> Vec<u8> {
    let dir = scratch();
    let (q, back) = (path(&dir, "l.qcow2"), path(&dir, "l.raw"));
    std::fs::write(&q, img).expect("write");
    let out = Command::new("qemu-img")
        .args(["check", "-f", "qcow2", &q])
        .output()
        .expect("qemu-img (qemu-utils) is needed");
    assert!(
        out.status.success(),
        "{what}: qemu-img check failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    qemu_img(&["convert", "-f", "qcow2", "-O", "raw", &q, &back]);
    std::fs::read(&back).expect("read reference")
}

/// Converts with no lookahead and `block_size` blocks, re-reading from
/// memory in odd pieces; checks the sink calls and returns the summary.
fn convert_tight(img: &[u8], block_size: usize) -> Result<(Summary, Vec<u8>), Qcow2Error> {
    let mut sink = CheckSink::default();
    let mut again = MemReread::new(img);
    again.piece = 1000;
    let limits = Limits {
        lookahead_bytes: 0,
        ..Limits::default()
    };
    let summary = stream::run(img, &mut again, &mut sink, &limits, block_size)?;
    assert_eq!(summary.reread_bytes, again.served);
    Ok((summary, sink.verify().0))
}

/// Random bytes, or a compressible pattern when `compressible`.
fn fill(rng: &mut fastrand::Rng, len: usize, compressible: bool) -> Vec<u8> {
    let mut v = vec![0u8; len];
    if compressible {
        let a = rng.u8(..);
        for (i, b) in v.iter_mut().enumerate() {
            *b = if rng.u8(..16) == 0 {
                rng.u8(..)
            } else {
                a ^ (i / 64) as u8
            };
        }
    } else {
        rng.fill(&mut v);
    }
    v
}

/// A random layout: geometry, contents, and a random host order.
fn random_layout(seed: u64) -> (Layout, Vec<Piece>) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let extended_l2 = rng.u8(..4) == 0;
    let cluster_bits = if extended_l2 {
        [14, 16][rng.usize(..2)]
    } else {
        [9, 12, 16][rng.usize(..3)]
    };
    let cs = 1usize << cluster_bits;
    // qemu-img works in 512-byte sectors: sizes are multiples of them.
    let virtual_size = (rng.u64(4 << 20..7 << 20) / 512 + rng.u64(..64)) * 512;
    let guest_clusters = virtual_size.div_ceil(cs as u64);
    let density = rng.u64(20..80);
    let mut clusters = Vec::new();
    for g in 0..guest_clusters {
        if rng.u64(..100) >= density {
            continue;
        }
        let content = match rng.u8(..4) {
            0 => Content::Compressed(fill(&mut rng, cs, true)),
            1 if extended_l2 => {
                let allocated = rng.u32(..);
                Content::Subclusters {
                    data: fill(&mut rng, cs, false),
                    allocated,
                    zero: rng.u32(..) & !allocated,
                }
            }
            1 => Content::PreallocatedZero,
            _ => {
                let compressible = rng.bool();
                Content::Data(fill(&mut rng, cs, compressible))
            }
        };
        clusters.push((g, content));
    }
    let layout = Layout {
        cluster_bits,
        virtual_size,
        extended_l2,
        clusters,
    };
    let mut order = layout.pieces();
    rng.shuffle(&mut order);
    (layout, order)
}

/// Checks one built layout against qemu-img, tight and with the defaults.
fn check_layout(layout: &Layout, order: &[Piece], block_size: usize, what: &str) -> Summary {
    let img = layout.build(order);
    let reference = qemu_reference(&img, what);
    let (summary, disk) = convert_tight(&img, block_size).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_same(&disk, &reference, what);
    let (_, disk) = convert_checked(&img, &Limits::default())
        .unwrap_or_else(|e| panic!("{what}, default limits: {e}"));
    assert_same(&disk, &reference, &format!("{what}, default limits"));
    summary
}

/// A layout of 4 KiB clusters over 6 MiB: data, compressed and zero
/// clusters in two L2 tables' worth of guest space.
fn mixed_layout(seed: u64) -> Layout {
    let mut rng = fastrand::Rng::with_seed(seed);
    let cs = 4096;
    let clusters = (0..1536u64)
        .filter(|g| g % 3 != 1)
        .map(|g| {
            let content = match g % 7 {
                0 | 3 => Content::Compressed(fill(&mut rng, cs, true)),
                5 => Content::PreallocatedZero,
                _ => Content::Data(fill(&mut rng, cs, false)),
            };
            (g, content)
        })
        .collect();
    Layout {
        cluster_bits: 12,
        virtual_size: 6 << 20,
        extended_l2: false,
        clusters,
    }
}

#[test]
fn data_long_before_its_l2_table() {
    let layout = mixed_layout(1);
    // Refcounts and L1 first, every cluster, then the L2 tables last.
    let mut order = vec![Piece::RefcountTable, Piece::RefcountBlocks, Piece::L1];
    order.extend((0..layout.clusters.len()).map(Piece::Cluster));
    order.extend((0..layout.tables().len()).map(Piece::L2));
    let s = check_layout(&layout, &order, 65536, "data first, tables last");
    assert_eq!(s.reread_rounds, 1, "{s:?}");
    assert!(s.reread_bytes > 2 << 20, "{s:?}");
}

#[test]
fn every_table_at_the_end_of_the_file() {
    let layout = mixed_layout(2);
    let tables = layout.tables().len();
    // Clusters, then refcount blocks, the L2 tables and the L1 table last:
    // the L2 tables are still in the window when the L1 table names them,
    // the data behind them is read again in one round.
    let mut order: Vec<Piece> = (0..layout.clusters.len()).map(Piece::Cluster).collect();
    order.push(Piece::RefcountBlocks);
    order.extend((0..tables).rev().map(Piece::L2));
    order.extend([Piece::RefcountTable, Piece::L1]);
    let s = check_layout(&layout, &order, 65536, "tables at the end");
    assert_eq!(s.reread_rounds, 1, "{s:?}");
    // L2 tables first, then the data, and the L1 table last: a round reads
    // the L2 tables, a second one the data they map.
    let mut order = vec![Piece::RefcountTable, Piece::RefcountBlocks];
    order.extend((0..tables).map(Piece::L2));
    order.extend((0..layout.clusters.len()).map(Piece::Cluster));
    order.push(Piece::L1);
    let s = check_layout(&layout, &order, 65536, "L1 table at the end");
    assert_eq!(s.reread_rounds, 2, "{s:?}");
}

#[test]
fn clusters_in_reverse_guest_order() {
    let layout = mixed_layout(3);
    let mut order = vec![Piece::RefcountTable, Piece::RefcountBlocks];
    order.extend((0..layout.clusters.len()).rev().map(Piece::Cluster));
    order.extend([Piece::L2(0), Piece::L1, Piece::L2(1), Piece::L2(2)]);
    check_layout(&layout, &order, 4096, "reverse guest order");
}

#[test]
fn subclusters_in_any_order() {
    let mut rng = fastrand::Rng::with_seed(4);
    let cs = 1 << 16;
    let clusters = (0..90u64)
        .map(|g| {
            let content = match g % 4 {
                0 => Content::Data(fill(&mut rng, cs, false)),
                1 => Content::Compressed(fill(&mut rng, cs, true)),
                _ => {
                    let allocated = rng.u32(..) | (g % 3) as u32;
                    Content::Subclusters {
                        data: fill(&mut rng, cs, false),
                        allocated,
                        zero: !allocated & rng.u32(..),
                    }
                }
            };
            (g * 2, content)
        })
        .collect();
    let layout = Layout {
        cluster_bits: 16,
        virtual_size: (12 << 20) + 4096,
        extended_l2: true,
        clusters,
    };
    let tables_last = {
        let (tables, mut rest): (Vec<Piece>, Vec<Piece>) = layout
            .pieces()
            .into_iter()
            .partition(|p| matches!(p, Piece::L2(_) | Piece::L1));
        rest.extend(tables);
        rest
    };
    for (order, what) in [
        (layout.pieces(), "tables first"),
        (tables_last, "tables last"),
    ] {
        let s = check_layout(&layout, &order, 65536, &format!("subclusters, {what}"));
        assert!(s.data_clusters > 0);
    }
}

#[test]
fn random_layouts_match_qemu() {
    let (mut rounds, mut two_rounds) = (0, 0);
    for seed in 0..24 {
        let (layout, order) = random_layout(seed);
        let block = [4096, 65536, 3001][seed as usize % 3];
        let what = format!(
            "seed {seed} ({} B clusters, extended L2 {}, {} clusters, block {block})",
            1u64 << layout.cluster_bits,
            layout.extended_l2,
            layout.clusters.len()
        );
        let s = check_layout(&layout, &order, block, &what);
        rounds += u32::from(s.reread_rounds > 0);
        two_rounds += u32::from(s.reread_rounds > 1);
    }
    // The random orders put tables behind data most of the time.
    assert!(
        rounds >= 12 && two_rounds >= 4,
        "{rounds} re-read, {two_rounds} twice"
    );
}

#[test]
fn too_many_ranges_waiting_at_once_fail_within_the_bound() {
    // Tables first, then 1000 compressed clusters: each waits for its bytes.
    let mut rng = fastrand::Rng::with_seed(9);
    let layout = Layout {
        cluster_bits: 12,
        virtual_size: 8 << 20,
        extended_l2: false,
        clusters: (0..1000u64)
            .map(|g| (g * 2, Content::Compressed(fill(&mut rng, 4096, true))))
            .collect(),
    };
    let img = layout.build(&layout.pieces());
    let tight = Limits {
        max_ranges: 300,
        ..Limits::default()
    };
    let err = convert_err(&img, &tight);
    assert!(
        matches!(
            err,
            Qcow2Error::TooManyRanges {
                held: 301,
                limit: 300
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("not streamable within the memory bound"),
        "{err}"
    );
    // The same image within the default bound converts.
    let reference = qemu_reference(&img, "1000 compressed clusters");
    let (_, disk) = convert_checked(&img, &Limits::default()).unwrap();
    assert_same(&disk, &reference, "default bound");
}

#[test]
fn a_cluster_mapped_again_after_its_block_was_used_up_is_refused() {
    // Table 0 maps guest clusters 0..512, stored right behind it (2 MiB,
    // past what is read before the header is parsed); table 1 maps guest
    // clusters 512..612, stored before it (read again, as in the tests
    // above). Pointing one of table 1's entries at guest cluster 0's host
    // cluster makes two mappings of the same bytes: that block was used up
    // when it left the window and kept no digest, so its bytes cannot be
    // read again and checked.
    let mut rng = fastrand::Rng::with_seed(9);
    let cs = 4096;
    let clusters: Vec<(u64, Content)> = (0..612)
        .map(|g| (g, Content::Data(fill(&mut rng, cs, false))))
        .collect();
    let layout = Layout {
        cluster_bits: 12,
        virtual_size: 6 << 20,
        extended_l2: false,
        clusters,
    };
    let mut order = vec![
        Piece::RefcountTable,
        Piece::RefcountBlocks,
        Piece::L1,
        Piece::L2(0),
    ];
    order.extend((0..612).map(Piece::Cluster));
    order.push(Piece::L2(1));
    let img = layout.build(&order);
    // As built, every block read again was not used up the first time.
    let (s, disk) = convert_tight(&img, cs).expect("as built");
    assert_eq!(s.reread_rounds, 1, "{s:?}");
    assert_same(&disk, &qemu_reference(&img, "as built"), "as built");

    let mut img = img;
    let entries = test_image::l2_entries(&img);
    let entry = |guest_cluster: u64| {
        *entries
            .iter()
            .find(|e| e.guest == guest_cluster * cs as u64)
            .expect("a mapped cluster")
    };
    let (first, later) = (entry(0), entry(562));
    test_image::put64(&mut img, later.at as usize, first.raw);
    let err = convert_tight(&img, cs).map(|(s, _)| s).unwrap_err();
    assert!(matches!(err, Qcow2Error::InvalidMetadata { .. }), "{err:?}");
    assert!(
        err.to_string().contains("two mappings share host bytes"),
        "{err}"
    );
    assert_eq!(err.class(), ErrorClass::Image);
}
