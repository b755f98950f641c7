package app

import (
	"context"
	"strings"
	"testing"
)

// The key control routes: PUT sets any of rate, weight and paused and
// answers the key's controls; GET lists them; DELETE clears them; bad
// bodies and values are 400s naming the problem, a downstream without
// fairness a 400, an unknown one a 404; nothing refused is written.
func TestKeyControlRoutes(t *testing.T) {
	t.Parallel()
	r := newRoutes(t, "  - {name: api, rate: 50/s, fairness: {key: tenant}, handler: {type: log}}\n  - {name: plain, rate: 5/s, handler: {type: log}}\n")
	d := r.d
	do := func(method, path, body string) (int, map[string]any) {
		code, v, _ := r.do(t, method, path, body)
		return code, v
	}
	code, v := do("PUT", "/v1/downstreams/api/keys/acme", `{"rate":"10/s","weight":2,"paused":true}`)
	c, _ := v["controls"].(map[string]any)
	if code != 200 || c["rate"] != "10/s" || c["weight"] != 2.0 || c["paused"] != true {
		t.Errorf("PUT acme: %d %v, want 200 and its controls", code, v)
	}
	code, v = do("GET", "/v1/downstreams/api/keys", "")
	if k, _ := v["keys"].(map[string]any); code != 200 || k["acme"] == nil {
		t.Errorf("GET keys: %d %v, want acme listed", code, v)
	}
	for _, step := range []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"PUT", "/v1/downstreams/api/keys/bob", `{"rate":"100/s"}`, 400, "above the downstream's rate"},
		{"PUT", "/v1/downstreams/api/keys/bob", `{"weight":-2}`, 400, "weight must be in"},
		{"PUT", "/v1/downstreams/api/keys/bob", `{}`, 400, "body must be an object"},
		{"PUT", "/v1/downstreams/api/keys/bob", `{"speed":1}`, 400, "body must be an object"},
		{"PUT", "/v1/downstreams/plain/keys/bob", `{"paused":true}`, 400, "has no fairness"},
		{"PUT", "/v1/downstreams/nope/keys/bob", `{"paused":true}`, 404, "unknown downstream"},
	} {
		code, v := do(step.method, step.path, step.body)
		if msg, _ := v["error"].(string); code != step.code || !strings.Contains(msg, step.want) {
			t.Errorf("%s %s %s: %d %q, want %d and %q", step.method, step.path, step.body, code, msg, step.code, step.want)
		}
	}
	m, err := d.Control().KeyControls(context.Background(), "api")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m["bob"]; ok || len(m) != 1 {
		t.Errorf("after refused PUTs: %+v, want acme alone", m)
	}
	if code, _ := do("DELETE", "/v1/downstreams/api/keys/acme", ""); code != 200 {
		t.Errorf("DELETE acme: %d, want 200", code)
	}
	if m, _ := d.Control().KeyControls(context.Background(), "api"); len(m) != 0 {
		t.Errorf("after DELETE: %+v, want none", m)
	}
}
