//! Icechunk repositories (written by Python icechunk, `scripts/make-fixtures.py icechunk`): a
//! branch, a tag and a snapshot read right through the mount; a branch mount takes writes,
//! growth and new nodes, and commits them at fsync and at the unmount, where a new mount reads
//! them back and the tag still shows what it showed.

mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use common::{Mount, copy_store, fixtures};

fn fixture() -> PathBuf {
    fixtures().join("icechunk")
}

fn expected(name: &str) -> Vec<u8> {
    std::fs::read(fixture().join("expected").join(name)).expect("expected bytes")
}

/// `REPO|icechunk:REF` and what follows, as a mount source.
fn source(repo: &Path, tail: &str) -> PathBuf {
    PathBuf::from(format!("{}|icechunk:{tail}", repo.display()))
}

#[test]
fn a_python_repository_reads_right_at_its_branch_tag_and_snapshot() {
    if common::backend::local_only("the repository is a local directory; Icechunk on S3 is checked by scripts/check-icechunk.py") {
        return;
    }
    let repo = fixture().join("repo");
    // The directory of a repository is mounted as its main branch.
    let main = Mount::new(&repo, &["--read-only"]);
    assert_eq!(std::fs::read(main.path("plain/data")).expect("plain"), expected("main/plain.bin"));
    assert_eq!(std::fs::read(main.path("g/sharded/data")).expect("sharded"), expected("main/g-sharded.bin"));
    let root = std::fs::read_to_string(main.path("zarr.json")).expect("root document");
    assert!(root.contains("Python icechunk"), "{root}");
    // Ranged reads of a shard stored as its own object.
    let mut part = vec![0u8; 100];
    std::fs::File::open(main.path("g/sharded/data")).expect("open").read_exact_at(&mut part, 3000).expect("read");
    assert_eq!(part, expected("main/g-sharded.bin")[3000..3100]);
    drop(main);

    let snapshot = std::fs::read_to_string(fixture().join("expected/v1.snapshot")).expect("snapshot id");
    // The history, newest first, with the IDs that mount.
    let log = std::process::Command::new(common::bin()).arg("log").arg(source(&repo, "")).output().expect("zarrfs log");
    let log = String::from_utf8_lossy(&log.stdout).into_owned();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 3, "{log}");
    assert!(lines[0].ends_with("second: plain rewritten, g/sharded added") && lines[2].ends_with("Repository initialized"), "{log}");
    assert!(lines[1].starts_with(snapshot.trim()), "{log}");
    for tail in ["@tag.v1".to_string(), format!("@{}", snapshot.trim())] {
        let tag = Mount::new(&source(&repo, &tail), &[]);
        assert_eq!(std::fs::read(tag.path("plain/data")).expect("plain"), expected("v1/plain.bin"), "{tail}");
        assert!(!tag.path("g").exists(), "{tail}: g came with the second commit");
        // Tags and snapshots are read-only, whatever the options say.
        let err = std::fs::OpenOptions::new().write(true).open(tag.path("plain/data")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{tail}");
    }

    // A node inside, by the pipeline.
    let inner = Mount::new(&source(&repo, "|zarr3:g"), &["--read-only"]);
    assert_eq!(std::fs::read(inner.path("sharded/data")).expect("sharded"), expected("main/g-sharded.bin"));

    // A reference that is not there is refused before anything is mounted.
    let dir = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(common::bin())
        .arg("mount")
        .arg(source(&repo, "@tag.nope"))
        .arg(dir.path())
        .output()
        .expect("zarrfs mount");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("@tag.nope"), "{err}");
}

#[test]
fn a_branch_mount_commits_writes_growth_and_new_nodes() {
    if common::backend::local_only("the repository is a local directory") {
        return;
    }
    let (_dir, repo) = copy_store(&fixture().join("repo"));
    let mut plain = expected("main/plain.bin");
    let mut sharded = expected("main/g-sharded.bin");
    let row: Vec<u8> = (0..7i16).flat_map(|v| (v * 11).to_le_bytes()).collect();
    {
        let mut m = Mount::new(&source(&repo, ""), &[]);
        // Rows appended past the last chunk (Icechunk takes a chunk once the shape holds it),
        // made durable by fsync: a commit.
        let f = std::fs::OpenOptions::new().append(true).open(m.path("plain/data")).expect("open plain");
        for _ in 0..3 {
            std::io::Write::write_all(&mut &f, &row).expect("append");
            plain.extend_from_slice(&row);
        }
        f.sync_all().expect("fsync commits");
        drop(f);
        let f = std::fs::OpenOptions::new().write(true).open(m.path("g/sharded/data")).expect("open sharded");
        f.write_all_at(&[7u8; 64], 1000).expect("write");
        sharded[1000..1064].copy_from_slice(&[7u8; 64]);
        drop(f);
        std::fs::create_dir(m.path("new")).expect("mkdir: a new group");
        assert!(m.stop().is_some_and(|s| s.success()), "the unmount commits: {}", m.log_text());
        let log = m.log_text();
        assert!(log.contains("committed: zarrfs: plain"), "{log}");
    }
    let again = Mount::new(&source(&repo, ""), &["--read-only"]);
    assert_eq!(std::fs::read(again.path("plain/data")).expect("plain"), plain);
    assert_eq!(std::fs::read(again.path("g/sharded/data")).expect("sharded"), sharded);
    assert!(again.path("new/zarr.json").exists(), "the new group was committed");
    let tag = Mount::new(&source(&repo, "@tag.v1"), &[]);
    assert_eq!(std::fs::read(tag.path("plain/data")).expect("plain"), expected("v1/plain.bin"), "the tag did not move");
}

#[test]
fn a_saved_document_and_a_lone_hierarchy_edit_are_committed() {
    if common::backend::local_only("the repository is a local directory") {
        return;
    }
    let (_dir, repo) = copy_store(&fixture().join("repo"));
    let mut m = Mount::new(&source(&repo, ""), &[]);
    // A document saved through the mount is committed at its close: a new daemon reading the
    // branch sees it while the first is still mounted.
    let doc = std::fs::read_to_string(m.path("plain/zarr.json")).expect("document");
    let changed = doc.replacen("\"attributes\": {}", "\"attributes\": {\"saved\": \"at close\"}", 1);
    assert_ne!(doc, changed, "an attributes object to add to: {doc}");
    std::fs::write(m.path("plain/zarr.json"), &changed).expect("save the document");
    let reader = Mount::new(&source(&repo, ""), &["--read-only"]);
    let seen = std::fs::read_to_string(reader.path("plain/zarr.json")).expect("document");
    assert!(seen.contains("at close"), "committed at close: {seen}");
    drop(reader);
    assert!(m.stop().is_some_and(|s| s.success()), "{}", m.log_text());
    // An edit of the hierarchy alone, in a mount where no array was opened: committed at the
    // unmount.
    let mut m = Mount::new(&source(&repo, ""), &[]);
    std::fs::create_dir(m.path("lone")).expect("mkdir");
    assert!(m.stop().is_some_and(|s| s.success()), "{}", m.log_text());
    let again = Mount::new(&source(&repo, ""), &["--read-only"]);
    assert!(again.path("lone/zarr.json").exists(), "the lone group was committed at the unmount");
}

#[test]
fn the_history_shows_as_read_only_directories_newest_first() {
    if common::backend::local_only("the repository is a local directory") {
        return;
    }
    let (_dir, repo) = copy_store(&fixture().join("repo"));
    let v1 = std::fs::read_to_string(fixture().join("expected/v1.snapshot")).expect("snapshot id").trim().to_string();
    let m = Mount::new(&source(&repo, ""), &["--metadata-ttl", "1"]);
    let snapshots = m.path(".zarrfs/snapshots");
    let listed = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir).expect("list").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect()
    };
    // In the order of the history (`ls -U`), newest first, as `zarrfs log` gives it.
    let ids = listed(&snapshots);
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert_eq!(ids[1], v1, "{ids:?}");
    assert!(listed(&m.path(".zarrfs")).contains(&"snapshots".to_string()));
    let at_v1 = snapshots.join(&v1);
    assert_eq!(std::fs::read(at_v1.join("plain/data")).expect("plain at v1"), expected("v1/plain.bin"));
    assert!(!at_v1.join("g").exists(), "g came with the second commit");
    assert!(!at_v1.join(".zarrfs").exists(), "a snapshot's tree has no .zarrfs of its own");
    // The newest is the branch as it is: `diff -r` finds nothing, `cmp` against v1 a difference.
    let newest = snapshots.join(&ids[0]);
    let diff = std::process::Command::new("diff").arg("-r").arg("-x").arg(".zarrfs").arg(&newest).arg(m.path("")).output().expect("diff");
    assert!(diff.status.success(), "{}", String::from_utf8_lossy(&diff.stdout));
    let cmp = std::process::Command::new("cmp").arg("-s").arg(at_v1.join("plain/data")).arg(m.path("plain/data")).status().expect("cmp");
    assert_eq!(cmp.code(), Some(1), "plain was rewritten after v1");
    // `ls -l` of the history opens no snapshot, and every entry has attributes.
    let ls = std::process::Command::new("ls").arg("-l").arg(&snapshots).output().expect("ls");
    assert!(ls.status.success() && String::from_utf8_lossy(&ls.stdout).lines().count() == 4, "{}", String::from_utf8_lossy(&ls.stdout));
    // Read-only, whatever the branch mount may do; no ID that is not in the history.
    let err = std::fs::OpenOptions::new().write(true).open(at_v1.join("plain/data")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    assert_eq!(std::fs::create_dir(at_v1.join("new")).unwrap_err().raw_os_error(), Some(libc::EROFS));
    assert_eq!(std::fs::rename(m.path("plain"), at_v1.join("moved")).unwrap_err().raw_os_error(), Some(libc::EXDEV));
    assert!(!snapshots.join("0000000000000000000A").exists());
    // A commit through the mount shows at the top once the TTL has passed, and what it
    // replaced stays readable below it.
    let before = std::fs::read(m.path("plain/data")).expect("plain");
    let f = std::fs::OpenOptions::new().write(true).open(m.path("plain/data")).expect("open plain");
    f.write_all_at(&[9u8; 4], 0).expect("write");
    f.sync_all().expect("fsync commits");
    drop(f);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let now = listed(&snapshots);
    assert_eq!(now.len(), 4, "{now:?}");
    assert_eq!(now[1], ids[0], "{now:?}");
    assert_eq!(std::fs::read(snapshots.join(&now[1]).join("plain/data")).expect("the old tip"), before);
    assert_eq!(std::fs::read(snapshots.join(&now[0]).join("plain/data")).expect("the new tip")[..4], [9u8; 4]);
}

#[test]
fn a_chunk_file_that_links_out_of_the_repository_is_not_followed() {
    if common::backend::local_only("the repository is a local directory") {
        return;
    }
    let (dir, repo) = copy_store(&fixture().join("repo"));
    // Every chunk file moved outside the repository, a link to it left in its place: whole,
    // valid bytes, so only the refusal to follow the link tells this read from a good one.
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).expect("outside");
    for entry in std::fs::read_dir(repo.join("chunks")).expect("chunks") {
        let path = entry.expect("entry").path();
        let moved = outside.join(path.file_name().expect("name"));
        std::fs::rename(&path, &moved).expect("move the chunk file out");
        std::os::unix::fs::symlink(&moved, &path).expect("link");
    }
    let mount = Mount::new(&source(&repo, ""), &["--read-only"]);
    let failed: Vec<_> = ["plain/data", "g/sharded/data"].iter().filter_map(|p| std::fs::read(mount.path(p)).err()).collect();
    assert!(!failed.is_empty(), "an array read through links out of the repository");
    assert!(failed.iter().all(|e| e.raw_os_error() == Some(libc::EIO)), "{failed:?}");
    let log = mount.log_text();
    assert!(log.contains("leads out of the store"), "the log names the link: {log}");
}
