package policyfiles

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// maxFileSize bounds one policy file, so a stray large file cannot take
// the process's memory.
const maxFileSize = 4 << 20

// readAttempts is how often, within one poll, a file that changes while it
// is read is read again before the next poll is left to try.
const readAttempts = 3

// version is one version of a file's contents, read whole.
type version struct {
	data []byte
	hash [sha256.Size]byte
	// info is the file's stat, identical before and after the read.
	info fs.FileInfo
}

// same reports whether v and o are the same contents of the same file
// with the same modification time, as read at different times.
func (v *version) same(o *version) bool {
	return o != nil && v.hash == o.hash && os.SameFile(v.info, o.info) && v.info.ModTime().Equal(o.info.ModTime())
}

// fileState is what the reads of one file have found so far.
type fileState struct {
	// applied is the version in force (nil before the first one settles).
	applied *version
	// pending is a newer version read whole that has not yet been seen
	// unchanged for the settle time; pendingSince is when it was first read.
	pending      *version
	pendingSince time.Time
	// changingSince is when the file was first found changing (a pending
	// version or a read that never matched its stat); zero once settled.
	changingSince time.Time
}

var (
	// errGone is a file removed between the listing and the read.
	errGone = errors.New("removed")
	// errUnstable is a file that changed during each of the reads of one poll.
	errUnstable = errors.New("changed while it was read")
)

// entry is a policy file found in the folder.
type entry struct {
	path string
	// typ is the entry's type in the folder listing (a symlink is not
	// followed here).
	typ fs.FileMode
}

// listFiles lists the YAML and JSON files under dir, sorted. A subfolder
// that cannot be read is reported and the rest listed; only the folder
// itself failing is an error.
func listFiles(dir string) ([]entry, []FileError, error) {
	var (
		entries []entry
		dirErrs []FileError
	)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			dirErrs = append(dirErrs, FileError{File: p, Err: fmt.Errorf("folder cannot be read: %w", pathErr(err))})
			return nil
		}
		if d.IsDir() {
			if p != dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir // editors' and ConfigMaps' hidden folders
			}
			return nil
		}
		switch strings.ToLower(filepath.Ext(p)) {
		case ".yaml", ".yml", ".json":
			if !strings.HasPrefix(d.Name(), ".") {
				entries = append(entries, entry{path: p, typ: d.Type()})
			}
		}
		return nil
	})
	sort.Slice(entries, func(i, j int) bool { return entries[i].path < entries[j].path })
	return entries, dirErrs, err
}

// readFile reads a regular file (or a symlink to one) whole. The stat
// before the read, of the open file, and after the read must agree
// (inode, size, modification time), else it is read again; errUnstable
// when it never does.
func (f *Folder) readFile(path string) (*version, error) {
	for range readAttempts {
		v, err := f.readOnce(path)
		if !errors.Is(err, errUnstable) {
			return v, err
		}
	}
	return nil, errUnstable
}

func (f *Folder) readOnce(path string) (*version, error) {
	before, err := os.Stat(path)
	if err != nil {
		return nil, openError(path, err)
	}
	if !before.Mode().IsRegular() {
		return nil, skipped(path, before.Mode())
	}
	if before.Size() > maxFileSize {
		return nil, fmt.Errorf("larger than %d MiB; not read", maxFileSize>>20)
	}
	// Non-blocking: should the path have become a FIFO since the stat, the
	// open returns at once instead of waiting for a writer.
	fh, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, openError(path, err)
	}
	defer fh.Close()
	opened, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %w", pathErr(err))
	}
	if !opened.Mode().IsRegular() {
		return nil, skipped(path, opened.Mode())
	}
	if !sameStat(before, opened) {
		return nil, errUnstable
	}
	b, err := io.ReadAll(io.LimitReader(fh, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %w", pathErr(err))
	}
	if f.afterRead != nil {
		f.afterRead(path)
	}
	after, err := os.Stat(path)
	if err != nil || !sameStat(opened, after) || int64(len(b)) != after.Size() {
		// Written, truncated, replaced or removed meanwhile: the next
		// attempt finds out which.
		return nil, errUnstable
	}
	return &version{data: b, hash: sha256.Sum256(b), info: after}, nil
}

// sameStat reports whether two stats show the same file, unchanged.
func sameStat(a, b fs.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// openError explains why path could not be opened: a symlink loop or a
// dangling symlink names its target; a file removed since the listing is
// errGone.
func openError(path string, err error) error {
	err = pathErr(err)
	l, lerr := os.Lstat(path)
	switch {
	case errors.Is(lerr, fs.ErrNotExist):
		return errGone
	case lerr == nil && l.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(path)
		return fmt.Errorf("symlink to %q cannot be followed: %w", target, err)
	}
	return fmt.Errorf("cannot be read: %w", err)
}

// skipped is the error of a path that is not a regular file (or a symlink
// to one): it is never read.
func skipped(path string, mode fs.FileMode) error {
	what := fileKind(mode)
	if l, err := os.Lstat(path); err == nil && l.Mode()&fs.ModeSymlink != 0 {
		target, _ := os.Readlink(path)
		return fmt.Errorf("skipped, never opened: symlink to %q, which is %s, not a regular file", target, what)
	}
	return fmt.Errorf("skipped, never opened: %s, not a regular file", what)
}

func fileKind(mode fs.FileMode) string {
	switch {
	case mode&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeCharDevice != 0:
		return "a character device"
	case mode&fs.ModeDevice != 0:
		return "a device"
	case mode.IsDir():
		return "a folder"
	default:
		return "a special file"
	}
}

// pathErr drops the path from an *fs.PathError: reports name the file already.
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// readAll reads the listed files and decides, for each, the version to
// compile: a version is applied once it has stayed unchanged for the
// settle time, so a file caught between a writer's writes (truncated, or
// a prefix that happens to parse) is not applied; until then the version
// in force stays. It returns the contents to compile and the files that
// cannot be read, are skipped, or have kept changing for long.
func (f *Folder) readAll(entries []entry, now time.Time) (map[string]*version, []FileError) {
	contents := make(map[string]*version, len(entries))
	var errs []FileError
	listed := make(map[string]bool, len(entries))
	for _, e := range entries {
		st := f.files[e.path]
		if st == nil {
			st = &fileState{}
		}
		var v *version
		var err error
		if e.typ&fs.ModeType != 0 && e.typ&fs.ModeSymlink == 0 {
			// A FIFO, socket or device: even opening it can block or act.
			err = skipped(e.path, e.typ)
		} else {
			v, err = f.readFile(e.path)
		}
		switch {
		case errors.Is(err, errGone):
			continue
		case errors.Is(err, errUnstable):
			f.changing(st, e.path, now, "changed during each read")
		case err != nil:
			errs = append(errs, FileError{File: e.path, Err: err})
			st.pending, st.changingSince = nil, time.Time{}
		case st.applied != nil && v.hash == st.applied.hash:
			st.applied, st.pending, st.changingSince = v, nil, time.Time{}
		case now.Sub(v.info.ModTime()) >= f.settle || (v.same(st.pending) && now.Sub(st.pendingSince) >= f.settle):
			// Unchanged for the settle time, by its modification time or,
			// should that be in the future (another machine's clock), by
			// this process's reads.
			st.applied, st.pending, st.changingSince = v, nil, time.Time{}
		default:
			if !v.same(st.pending) {
				st.pending, st.pendingSince = v, now
			}
			f.changing(st, e.path, now, "changed recently; its new version applies once it stays unchanged")
		}
		listed[e.path] = true
		f.files[e.path] = st
		if err == nil || errors.Is(err, errUnstable) {
			if st.applied != nil {
				contents[e.path] = st.applied
			}
			if !st.changingSince.IsZero() && now.Sub(st.changingSince) >= f.changingLimit() {
				what := "no version of it has been read whole yet"
				if st.applied != nil {
					what = "the last version read whole stays in force"
				}
				errs = append(errs, FileError{File: e.path, Err: fmt.Errorf("has kept changing since %s; %s",
					st.changingSince.UTC().Format(time.RFC3339), what)})
			}
		}
	}
	for p := range f.files {
		if !listed[p] {
			delete(f.files, p)
		}
	}
	return contents, errs
}

// changing notes that path has a version not yet applied.
func (f *Folder) changing(st *fileState, path string, now time.Time, why string) {
	if st.changingSince.IsZero() {
		st.changingSince = now
		f.log.Debug("policy file "+why, "file", path, "settle", f.settle)
	}
}

// changingLimit is how long a file may keep changing before it is reported.
func (f *Folder) changingLimit() time.Duration { return 10 * f.settle }

// unsettled reports whether some file has a version not yet applied.
func (f *Folder) unsettled() bool {
	f.reloadMu.Lock()
	defer f.reloadMu.Unlock()
	for _, st := range f.files {
		if !st.changingSince.IsZero() {
			return true
		}
	}
	return false
}

// folderRead is one reading of the folder.
type folderRead struct {
	entries  []entry
	contents map[string]*version // by path; nil for a file not read
	dirErrs  []FileError         // folders that cannot be listed
	readErrs []FileError         // dirErrs and the files that cannot be read
	// signature changes whenever a file's contents or error does.
	signature string
}

func (f *Folder) read() (*folderRead, error) {
	entries, dirErrs, err := listFiles(f.dir)
	if err != nil {
		return nil, err
	}
	contents, readErrs := f.readAll(entries, f.now())
	r := &folderRead{entries: entries, contents: contents, dirErrs: dirErrs, readErrs: append(dirErrs, readErrs...)}
	h := sha256.New()
	for _, e := range entries {
		if v := contents[e.path]; v != nil {
			fmt.Fprintf(h, "%s\x00%x\x00", e.path, v.hash)
		}
	}
	for _, fe := range r.readErrs {
		fmt.Fprintf(h, "%s\x00error\x00%v\x00", fe.File, fe.Err)
	}
	r.signature = string(h.Sum(nil))
	return r, nil
}
