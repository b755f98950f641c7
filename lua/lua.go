// Package lua holds shaper's Redis Lua scripts: one .lua file per script,
// each with its KEYS, ARGV and reply contract in its header comment,
// embedded with go:embed and handed out by file name with Source.
//
// The admission scripts run after prelude_clock.lua and
// prelude_admission.lua, the scripts that read the time after
// prelude_clock.lua, fair.lua after prelude_fairpos.lua and
// prelude_fairturn.lua, take.lua after those two, prelude_reserve.lua
// (the bucket's reservation, which shaping.lua runs after too) and
// prelude_taskmsg.lua, and before take_fairline.lua and take_pick.lua
// (one script in three files, sharing its locals), and
// take_hold.lua after prelude_fairpos.lua;
// each prelude's header names what it defines. Package
// internal/lua does the concatenation and puts every script behind one
// typed method of its Store (named arguments, a checked reply): nothing
// else knows an ARGV position, a mode number or a reply's layout.
//
// Every script reads Redis TIME unless handed an explicit now (tests only;
// 0 means Redis TIME), sets a TTL on every key it writes, and touches only
// keys that share the hash tag of KEYS[1].
package lua

import "embed"

//go:embed *.lua
var files embed.FS

// Source is the text of the script or prelude in the file name (such as
// "take.lua"). It panics on a name that is not embedded: callers name
// their scripts as constants when their package initialises, so a wrong
// name is a programming error that stops every binary and test at start.
func Source(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic("lua: no script " + name + ": " + err.Error())
	}
	return string(b)
}
