package store_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"mailroom/store"
)

func TestSecureDir(t *testing.T) {
	t.Parallel()
	mode := func(dir string) fs.FileMode {
		t.Helper()
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	// A new dir is made 0700.
	fresh := filepath.Join(t.TempDir(), "a", "data")
	if loose, err := store.SecureDir(fresh); err != nil || loose != 0 {
		t.Fatalf("new dir: loose %04o, %v", loose, err)
	}
	if m := mode(fresh); m != 0o700 {
		t.Errorf("new dir mode %04o, want 0700", m)
	}
	// A looser existing dir is tightened, and its old mode reported.
	for _, was := range []fs.FileMode{0o755, 0o750, 0o777, 0o701} {
		dir := t.TempDir()
		if err := os.Chmod(dir, was); err != nil {
			t.Fatal(err)
		}
		loose, err := store.SecureDir(dir)
		if err != nil || loose != was {
			t.Errorf("dir at %04o: loose %04o, %v", was, loose, err)
		}
		if m := mode(dir); m != 0o700 {
			t.Errorf("dir at %04o: now %04o, want 0700", was, m)
		}
	}
	// A tight one is left alone, and nothing is reported.
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if loose, err := store.SecureDir(dir); err != nil || loose != 0 {
		t.Errorf("tight dir: loose %04o, %v", loose, err)
	}
}
