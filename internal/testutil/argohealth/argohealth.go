// Package argohealth runs an Argo CD resource health script (Lua) on an
// object the way Argo CD does: gopher-lua with only the package, base and
// table libraries (Argo CD opens no others unless useOpenLibs is set for the
// kind, and adds a reduced os library this package leaves out), a short
// deadline, the object as the global `obj` (maps and lists become tables,
// numbers become Lua numbers), and the returned table's `status` and
// `message` as the result.
package argohealth

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// The statuses Argo CD knows.
const (
	Healthy     = "Healthy"
	Progressing = "Progressing"
	Degraded    = "Degraded"
	Suspended   = "Suspended"
	Missing     = "Missing"
	Unknown     = "Unknown"
)

// Result is what a health script returned.
type Result struct {
	Status  string
	Message string
}

// Evaluate runs script with obj (an object as unstructured JSON: maps,
// slices, strings, float64 or int64 numbers, bools) as `obj`.
func Evaluate(script string, obj map[string]any) (Result, error) {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	L.SetContext(ctx)
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(script); err != nil {
		return Result{}, fmt.Errorf("health script: %w", err)
	}
	ret, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		return Result{}, errors.New("health script: did not return a table")
	}
	res := Result{Status: lua.LVAsString(ret.RawGetString("status")), Message: lua.LVAsString(ret.RawGetString("message"))}
	switch res.Status {
	case Healthy, Progressing, Degraded, Suspended, Missing, Unknown:
		return res, nil
	}
	return res, fmt.Errorf("health script: status %q is not one Argo CD knows", res.Status)
}

func toLua(ls *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case nil:
		return lua.LNil
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case []any:
		t := ls.NewTable()
		for _, e := range v {
			t.Append(toLua(ls, e))
		}
		return t
	case map[string]any:
		t := ls.NewTable()
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			t.RawSetString(k, toLua(ls, v[k]))
		}
		return t
	}
	return lua.LString(fmt.Sprint(v))
}
