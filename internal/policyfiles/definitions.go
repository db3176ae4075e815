package policyfiles

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
)

// policyID names a policy. A struct rather than "namespace/name": names
// are checked as the API server checks them, and the key does not depend
// on that.
type policyID struct{ namespace, name string }

func (id policyID) String() string { return id.namespace + "/" + id.name }

// document is one definition of a policy: a YAML document of a file.
type document struct {
	file  string
	index int // 1-based, among the file's YAML documents
	spec  *ratelimitv1alpha1.RateLimitPolicy
	// invalid is why the API server would refuse the document (the CRD
	// schema's errors, each naming its field); nil when it would not.
	invalid error
}

// compile compiles the document's policy, spec in place of its own (an
// in-memory edit's, or its own): a policy the API server would refuse does
// not compile, with the schema's errors.
func (d document) compile(id policyID, spec *ratelimitv1alpha1.RateLimitPolicySpec) (*policy.Policy, error) {
	if d.invalid != nil && spec == &d.spec.Spec {
		return nil, fmt.Errorf("document %d: %w", d.index, d.invalid)
	}
	return policy.Compile(id.namespace, id.name, spec)
}

// id is the policy's name, the namespace defaulted as kubectl does.
func (d document) id() policyID {
	ns := d.spec.Namespace
	if ns == "" {
		ns = "default"
	}
	return policyID{namespace: ns, name: d.spec.Name}
}

// nextSet is what one reload builds: the policies in force and what is
// reported about them.
type nextSet struct {
	inForce     map[policyID]*policy.Policy
	inForceFile map[policyID]string
	used        map[policyID]usedDoc
	statuses    []PolicyStatus
	fileErrors  []FileError
	compileErrs map[policyID]string
	// dupNote tells a policy's status where else it is defined.
	dupNote map[policyID]string
	// overrides are the RateLimitOverrides documents, by file.
	overrides map[string][]*ratelimitv1alpha1.RateLimitOverrides
}

// keptFiles are the files whose policies cannot be known this time (not
// readable, not parsed, or in a folder that cannot be listed): they keep
// their policies' last good versions.
type keptFiles struct {
	why     map[string]string // file -> why, for statuses
	dirErrs []FileError
	rel     func(string) string
}

// unreadable is r's files that could not be read.
func (f *Folder) unreadable(r *folderRead) *keptFiles {
	k := &keptFiles{why: map[string]string{}, dirErrs: r.dirErrs, rel: f.rel}
	for _, fe := range r.readErrs {
		if r.contents[fe.File] == nil {
			k.why[fe.File] = fmt.Sprintf("its file cannot be read: %v", fe.Err)
		}
	}
	return k
}

// reason says why file's policies are kept; false when they are not.
func (k *keptFiles) reason(file string) (string, bool) {
	if why, ok := k.why[file]; ok {
		return why, true
	}
	for _, de := range k.dirErrs {
		if strings.HasPrefix(file, de.File+string(filepath.Separator)) {
			return fmt.Sprintf("its folder %s cannot be read: %v", k.rel(de.File), de.Err), true
		}
	}
	return "", false
}

// definitions parses the files read: every definition of each policy, and
// the policies in file order. A file that does not parse is reported and
// kept.
func (f *Folder) definitions(r *folderRead, kept *keptFiles, n *nextSet) (map[policyID][]document, []policyID) {
	defs := map[policyID][]document{}
	var order []policyID
	for _, e := range r.entries {
		v := r.contents[e.path]
		if v == nil {
			continue
		}
		d, o, refused, err := parseFile(e.path, v.data)
		if err != nil {
			n.fileErrors = append(n.fileErrors, FileError{File: e.path, Err: err})
			kept.why[e.path] = fmt.Sprintf("its file does not parse: %v", err)
			continue
		}
		o, errs := keepLastGood(e.path, o, refused, f.overrides[e.path])
		n.fileErrors = append(n.fileErrors, errs...)
		if len(o) > 0 {
			n.overrides[e.path] = o
		}
		for _, doc := range d {
			id := doc.id()
			if defs[id] == nil {
				order = append(order, id)
			}
			defs[id] = append(defs[id], doc)
		}
	}
	return defs, order
}

// resolve decides which of id's definitions ds is applied, reports the
// others as duplicates, and compiles the one applied (or its in-memory
// edit): when it does not compile, the last good version stays in force.
func (f *Folder) resolve(id policyID, ds []document, kept *keptFiles, n *nextSet) {
	owner, keptOwner := f.owner(id, ds, kept.reason)
	f.reportDuplicates(id, ds, owner, keptOwner, n)
	if keptOwner {
		return // its status comes with the other kept policies
	}
	d := ds[owner]
	st := PolicyStatus{Namespace: id.namespace, Name: id.name, File: d.file, Spec: &d.spec.Spec}
	if e := f.edits[id]; e != nil && e.file == d.file {
		st.Spec, st.Edited, st.EditedAt = e.spec, true, e.at
	}
	n.used[id] = usedDoc{file: d.file, spec: st.Spec}
	p, err := d.compile(id, st.Spec)
	inForce, ok := f.good.InForce(id, p, err)
	if ok {
		n.inForce[id], n.inForceFile[id] = inForce, d.file
	}
	if err != nil {
		st.Message = err.Error()
		if ok {
			st.Message += " (the last good version stays in force)"
		}
		n.compileErrs[id] = err.Error()
		if f.compileErrs[id] != err.Error() {
			f.log.Error("policy not applied", "policy", id.String(), "file", d.file, "err", err)
		}
	} else {
		st.Ready = true
	}
	if note := n.dupNote[id]; note != "" {
		// In force, but not Ready: which definition counts is in doubt.
		st.Ready = false
		st.Message = joinMessages(st.Message, note)
	}
	n.statuses = append(n.statuses, st)
}

// reportDuplicates reports every definition of id but the owner's as not
// applied, on its file and in its own status.
func (f *Folder) reportDuplicates(id policyID, ds []document, owner int, keptOwner bool, n *nextSet) {
	ownerFile := f.goodFile[id]
	if !keptOwner {
		ownerFile = ds[owner].file
	}
	var others []string
	for i, d := range ds {
		if i == owner && !keptOwner {
			continue
		}
		others = append(others, f.rel(d.file))
		var err error
		switch {
		case d.file == ownerFile && !keptOwner:
			err = fmt.Errorf("policy %s is defined twice in this file (documents %d and %d); document %d is the one applied",
				id, ds[owner].index, d.index, ds[owner].index)
		case keptOwner:
			err = fmt.Errorf("policy %s is also defined in %s, whose last good version stays in force; this definition is not applied",
				id, f.rel(ownerFile))
		default:
			err = fmt.Errorf("policy %s is also defined in %s, whose definition is in force; this one is not applied",
				id, f.rel(ownerFile))
		}
		n.fileErrors = append(n.fileErrors, FileError{File: d.file, Err: err})
		n.statuses = append(n.statuses, PolicyStatus{Namespace: id.namespace, Name: id.name, File: d.file,
			Spec: &d.spec.Spec, Duplicate: true, Message: err.Error()})
	}
	if len(others) > 0 {
		n.dupNote[id] = fmt.Sprintf("also defined in %s, where it is not applied: keep one definition",
			strings.Join(others, ", "))
	}
}

// keepUnreadable keeps in force the last good version of each policy whose
// file cannot be read or parsed this time.
func (f *Folder) keepUnreadable(kept *keptFiles, n *nextSet) {
	for id, file := range f.goodFile {
		if _, present := n.inForce[id]; present {
			continue
		}
		why, ok := kept.reason(file)
		if !ok {
			continue
		}
		n.inForce[id], _ = f.good.Get(id)
		n.inForceFile[id] = file
		n.statuses = append(n.statuses, PolicyStatus{Namespace: id.namespace, Name: id.name, File: file,
			Message: joinMessages(why+" (the last good version stays in force)", n.dupNote[id])})
	}
}

// sortReports orders statuses by policy, the definition in use ahead of
// its duplicates, and file errors by file.
func sortReports(n *nextSet) {
	sort.SliceStable(n.statuses, func(i, j int) bool {
		a, b := n.statuses[i], n.statuses[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return !a.Duplicate && b.Duplicate
	})
	sort.SliceStable(n.fileErrors, func(i, j int) bool { return n.fileErrors[i].File < n.fileErrors[j].File })
}

// owner picks the definition of id that is applied among ds (in file
// order). A policy in force keeps coming from the file it came from while
// that file still defines it, or while that file cannot be read or parsed
// (keptOwner: its last good version stays); otherwise the first definition
// wins. So adding a second definition never changes which one is enforced.
func (f *Folder) owner(id policyID, ds []document, keptWhy func(string) (string, bool)) (owner int, keptOwner bool) {
	if _, ok := f.good.Get(id); !ok {
		return 0, false
	}
	incumbent := f.goodFile[id]
	if _, ok := keptWhy(incumbent); ok {
		return -1, true
	}
	for i, d := range ds {
		if d.file == incumbent {
			return i, false
		}
	}
	return 0, false
}

func joinMessages(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
