package policy

import (
	"errors"
	"testing"
)

func TestLastGood(t *testing.T) {
	invalid := errors.New("does not compile")
	l := NewLastGood[string, int]()

	if v, ok := l.InForce("a", 1, invalid); ok {
		t.Fatalf("an invalid first version is in force: %d", v)
	}
	if v, ok := l.InForce("a", 1, nil); !ok || v != 1 {
		t.Fatalf("a valid version is not in force: %d, %v", v, ok)
	}
	if _, ok := l.Get("a"); ok {
		t.Fatal("InForce recorded a version; only Accept should")
	}
	l.Accept("a", 1)
	if v, ok := l.InForce("a", 2, invalid); !ok || v != 1 {
		t.Fatalf("an invalid version replaced the last good one: %d, %v", v, ok)
	}
	if v, ok := l.InForce("a", 3, nil); !ok || v != 3 {
		t.Fatalf("a valid version did not replace the last good one: %d, %v", v, ok)
	}

	l.Accept("b", 10)
	l.Retain(func(k string) bool { return k == "b" })
	if _, ok := l.Get("a"); ok {
		t.Fatal("Retain kept a policy it was told to forget")
	}
	if v, ok := l.Get("b"); !ok || v != 10 {
		t.Fatalf("Retain dropped a policy it was told to keep: %d, %v", v, ok)
	}
	l.Forget("b")
	if _, ok := l.InForce("b", 11, invalid); ok {
		t.Fatal("a forgotten policy still has a last good version")
	}
}
