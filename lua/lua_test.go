package lua

import (
	"io/fs"
	"strings"
	"testing"
)

// TestEveryFileHasItsHeader checks that each embedded file is handed out
// by Source and opens with its header: its own name, and for a script
// (not a prelude) its KEYS contract.
func TestEveryFileHasItsHeader(t *testing.T) {
	names, err := fs.Glob(files, "*.lua")
	if err != nil || len(names) == 0 {
		t.Fatalf("embedded files: %v, %v", names, err)
	}
	for _, name := range names {
		src := Source(name)
		if !strings.HasPrefix(src, "-- "+name+": ") {
			t.Errorf("%s does not open with its name: %.40q", name, src)
		}
		if !strings.HasPrefix(name, "prelude_") && !strings.Contains(src, "-- KEYS[") {
			t.Errorf("%s: no KEYS contract in its header", name)
		}
	}
}

func TestSourcePanicsOnAnUnknownName(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Source(\"nope.lua\") did not panic")
		}
	}()
	Source("nope.lua")
}
