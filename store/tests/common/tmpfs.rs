//! A tmpfs the test mounts on a directory of its own, to fill a real filesystem (root
//! only, as the test command runs); unmounted when dropped.
#![allow(dead_code, unreachable_pub)] // each test binary uses its own part

use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted tmpfs.
pub struct Tmpfs {
    dir: PathBuf,
    _parent: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts one of `size` (`2m`).
    ///
    /// # Panics
    ///
    /// When `mount` fails: the test needs root.
    pub fn mount(size: &str) -> Tmpfs {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("small");
        std::fs::create_dir(&dir).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "idem-test"])
            .arg(&dir)
            .status()
            .expect("mount runs");
        assert!(
            mounted.success(),
            "mounting a tmpfs failed: this test needs root (the test command runs as root)"
        );
        Tmpfs {
            dir,
            _parent: parent,
        }
    }

    /// Grows (or shrinks) it to `size`, in place.
    ///
    /// # Panics
    ///
    /// When the remount fails.
    pub fn resize(&self, size: &str) {
        let resized = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.dir)
            .status()
            .unwrap();
        assert!(resized.success(), "remount to {size}");
    }

    /// Its mount point.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}
