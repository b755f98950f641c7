package replay

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"
	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// scriptHost runs EVAL and EVALSHA for the embedded Redis in this
// process: each script in one Lua state kept from call to call, each of
// its redis.call dispatched to miniredis's own command table. So the
// commands are miniredis's, and only the EVAL around them is this
// file's: miniredis builds a new Lua state, its libraries and its redis
// table for every call, ~0.2 ms of CPU, where a whole replayed line (its
// limiters' and its bucket's scripts) costs ~0.1 ms here. Values are
// converted as miniredis's scripting converts them (its lua.go): a
// number argument is written as LNumber.String(), a Lua number reply is
// truncated to an integer, false and nil are a nil reply, a table is an
// array up to its first nil, {err=…} an error and {ok=…} a status. A script's globals are its KEYS
// and ARGV over the shared libraries (base, table, string, math):
// setting a global is an error, as in Redis, so nothing one call sets is
// seen by the next. It is safe for concurrent use: scripts run one at a
// time (atomic with respect to one another, not to commands sent to
// miniredis meanwhile; a replay sends none).
type scriptHost struct {
	mu      sync.Mutex
	srv     *server.Server
	l       *lua.LState
	globals *lua.LTable // KEYS and ARGV of the call; reads fall through to the libraries
	scripts map[string]*lua.FunctionProto
	buf     bytes.Buffer
	w       *bufio.Writer
	rd      *bufio.Reader
	peer    *server.Peer
}

func newScriptHost(srv *server.Server) *scriptHost {
	h := &scriptHost{srv: srv, scripts: map[string]*lua.FunctionProto{}}
	h.w = bufio.NewWriter(&h.buf)
	h.rd = bufio.NewReader(&h.buf)
	h.peer = server.NewPeer(h.w)
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString},
		{lua.MathLibName, lua.OpenMath}} {
		l.Push(l.NewFunction(lib.open))
		l.Push(lua.LString(lib.name))
		l.Call(1, 0)
	}
	rt := l.NewTable()
	rt.RawSetString("call", l.NewFunction(func(l *lua.LState) int { return h.call(l, true) }))
	rt.RawSetString("pcall", l.NewFunction(func(l *lua.LState) int { return h.call(l, false) }))
	rt.RawSetString("error_reply", l.NewFunction(func(l *lua.LState) int { return reply(l, "err", "ERR ") }))
	rt.RawSetString("status_reply", l.NewFunction(func(l *lua.LState) int { return reply(l, "ok", "") }))
	rt.RawSetString("replicate_commands", l.NewFunction(func(l *lua.LState) int { l.Push(lua.LTrue); return 1 }))
	rt.RawSetString("log", l.NewFunction(func(*lua.LState) int { return 0 }))
	l.SetGlobal("redis", rt)
	meta := l.NewTable()
	meta.RawSetString("__index", l.G.Global)
	meta.RawSetString("__newindex", l.NewFunction(func(l *lua.LState) int {
		l.RaiseError("Script attempted to create global variable '%s'", l.ToString(2))
		return 0
	}))
	h.l, h.globals = l, l.CreateTable(0, 2)
	l.SetMetatable(h.globals, meta)
	return h
}

// reply is redis.error_reply (code "ERR ") and redis.status_reply
// (code ""): {field = msg}; an error's leading - is dropped, and it gets
// the code ERR unless it has one (a first word).
func reply(l *lua.LState, field, code string) int {
	msg, ok := l.Get(1).(lua.LString)
	if !ok {
		l.RaiseError("wrong number or type of arguments")
		return 0
	}
	s := string(msg)
	if code != "" {
		if s = strings.TrimPrefix(s, "-"); !strings.Contains(s, " ") {
			s = code + s
		}
	}
	t := l.CreateTable(0, 1)
	t.RawSetString(field, lua.LString(s))
	l.Push(t)
	return 1
}

// process answers an EVAL or EVALSHA command of go-redis.
func (h *scriptHost) process(cmd *redis.Cmd) {
	h.mu.Lock()
	defer h.mu.Unlock()
	args := cmd.Args()
	if len(args) < 3 {
		cmd.SetErr(redisError("ERR wrong number of arguments for '" + cmd.Name() + "' command"))
		return
	}
	strs := make([]string, len(args)-1)
	for i, a := range args[1:] {
		s, err := argString(a)
		if err != nil {
			cmd.SetErr(err)
			return
		}
		strs[i] = s
	}
	nkeys, err := strconv.Atoi(strs[1])
	if err != nil || nkeys < 0 || nkeys > len(strs)-2 {
		cmd.SetErr(redisError("ERR Number of keys can't be greater than number of args"))
		return
	}
	var proto *lua.FunctionProto
	if strings.HasPrefix(cmd.Name(), "evalsha") {
		if proto = h.scripts[strings.ToLower(strs[0])]; proto == nil {
			cmd.SetErr(redisError("NOSCRIPT No matching script. Please use EVAL."))
			return
		}
	} else if proto, err = h.compile(strs[0]); err != nil {
		cmd.SetErr(err)
		return
	}
	v, err := h.run(proto, strs[2:2+nkeys], strs[2+nkeys:])
	switch {
	case err != nil:
		cmd.SetErr(err)
	case v == nil:
		cmd.SetErr(redis.Nil)
	default:
		if e, ok := v.(redisError); ok {
			cmd.SetErr(e)
			return
		}
		cmd.SetVal(v)
	}
}

// compile compiles src and keeps it under its SHA1, for EVALSHA.
func (h *scriptHost) compile(src string) (*lua.FunctionProto, error) {
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	if p := h.scripts[sha]; p != nil {
		return p, nil
	}
	chunk, err := parse.Parse(strings.NewReader(src), "@user_script")
	if err != nil {
		return nil, redisError("ERR Error compiling script: " + err.Error())
	}
	p, err := lua.Compile(chunk, "@user_script")
	if err != nil {
		return nil, redisError("ERR Error compiling script: " + err.Error())
	}
	noArgTable(p)
	h.scripts[sha] = p
	return p, nil
}

// noArgTable stops p and the functions in it from building Lua 5.0's
// implicit arg table of their varargs on every call (a table and a map
// for each call of each script, a third of what a replay allocated): no
// script of package lua reads arg (prelude_clock.lua's is a parameter),
// and a script's main chunk is a vararg function.
func noArgTable(p *lua.FunctionProto) {
	p.IsVarArg &^= lua.VarArgNeedsArg
	for _, c := range p.FunctionPrototypes {
		noArgTable(c)
	}
}

// run runs p with KEYS and ARGV and converts what it returns. Its
// globals hold only those two (a script cannot set any other), and read
// the libraries through.
func (h *scriptHost) run(p *lua.FunctionProto, keys, argv []string) (any, error) {
	l := h.l
	h.globals.RawSetString("KEYS", strings2table(l, keys))
	h.globals.RawSetString("ARGV", strings2table(l, argv))
	fn := l.NewFunctionFromProto(p)
	fn.Env = h.globals
	l.Push(fn)
	if err := l.PCall(0, 1, nil); err != nil {
		l.SetTop(0)
		var le *lua.ApiError
		if errors.As(err, &le) {
			return nil, redisError("ERR " + le.Object.String())
		}
		return nil, redisError("ERR " + err.Error())
	}
	v := l.Get(-1)
	l.SetTop(0)
	return fromLua(v), nil
}

func strings2table(l *lua.LState, ss []string) *lua.LTable {
	t := l.CreateTable(len(ss), 0)
	for i, s := range ss {
		t.RawSetInt(i+1, lua.LString(s))
	}
	return t
}

// call is redis.call (raise) and redis.pcall (return {err=…}): the
// command goes to miniredis's dispatcher, its reply comes back as Lua.
func (h *scriptHost) call(l *lua.LState, raise bool) int {
	top := l.GetTop()
	if top == 0 {
		l.RaiseError("Please specify at least one argument for this redis lib call")
		return 0
	}
	args := make([]string, top)
	for i := 1; i <= top; i++ {
		switch a := l.Get(i).(type) {
		case lua.LNumber:
			args[i-1] = a.String()
		case lua.LString:
			args[i-1] = string(a)
		default:
			l.RaiseError("Lua redis lib command arguments must be strings or integers")
			return 0
		}
	}
	h.buf.Reset()
	h.srv.Dispatch(h.peer, args)
	h.w.Flush()
	h.rd.Reset(&h.buf)
	res, err := server.ParseReply(h.rd)
	if err != nil {
		if raise {
			l.RaiseError("%s", err.Error())
			return 0
		}
		t := l.CreateTable(0, 1)
		t.RawSetString("err", lua.LString(err.Error()))
		l.Push(t)
		return 1
	}
	l.Push(toLua(l, res))
	return 1
}

// toLua converts a parsed miniredis reply, as miniredis's scripting does.
func toLua(l *lua.LState, v any) lua.LValue {
	switch r := v.(type) {
	case nil:
		return lua.LFalse
	case int:
		return lua.LNumber(r)
	case int64:
		return lua.LNumber(r)
	case string:
		return lua.LString(r)
	case []byte:
		return lua.LString(r)
	case server.Simple:
		t := l.CreateTable(0, 1)
		t.RawSetString("ok", lua.LString(r))
		return t
	case []any:
		t := l.CreateTable(len(r), 0)
		for i, e := range r {
			t.RawSetInt(i+1, toLua(l, e))
		}
		return t
	}
	return lua.LString(fmt.Sprint(v))
}

// fromLua converts a script's value to what go-redis reads from the
// RESP reply Redis would send for it: int64, string, nil, []any, or a
// redisError.
func fromLua(v lua.LValue) any {
	switch t := v.(type) {
	case lua.LBool:
		if t {
			return int64(1)
		}
		return nil
	case lua.LNumber:
		return int64(t)
	case lua.LString:
		return string(t)
	case *lua.LTable:
		if e := t.RawGetString("err"); e != lua.LNil {
			return redisError(e.String())
		}
		if s := t.RawGetString("ok"); s != lua.LNil {
			return s.String()
		}
		var out []any
		for j := 1; ; j++ {
			e := t.RawGetInt(j)
			if e == lua.LNil {
				break
			}
			out = append(out, fromLua(e))
		}
		if out == nil {
			out = []any{}
		}
		return out
	}
	return nil
}

// argString writes a go-redis command argument as its writer does.
func argString(a any) (string, error) {
	switch v := a.(type) {
	case string:
		return v, nil
	case []byte:
		return string(v), nil
	case int:
		return strconv.Itoa(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case int32:
		return strconv.FormatInt(int64(v), 10), nil
	case uint64:
		return strconv.FormatUint(v, 10), nil
	case uint32:
		return strconv.FormatUint(uint64(v), 10), nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case bool:
		if v {
			return "1", nil
		}
		return "0", nil
	case nil:
		return "", nil
	case fmt.Stringer:
		return v.String(), nil
	}
	return "", fmt.Errorf("replay: script argument of type %T", a)
}

// redisError is an error reply; go-redis recognises it as one (NOSCRIPT
// makes Script.Run fall back to EVAL).
type redisError string

func (e redisError) Error() string { return string(e) }

func (redisError) RedisError() {}
