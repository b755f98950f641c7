package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/shaper-io/shaper/internal/cliflags"
	"github.com/shaper-io/shaper/internal/control"
	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/internal/server"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping"
)

// keyControlJSON is one key's controls as ctl and the HTTP API show them.
type keyControlJSON struct {
	Rate   string  `json:"rate,omitempty"`
	Weight float64 `json:"weight,omitempty"`
	Paused bool    `json:"paused,omitempty"`
}

func toKeyControlsJSON(m map[string]shaping.KeyControl) map[string]keyControlJSON {
	out := make(map[string]keyControlJSON, len(m))
	for k, c := range m {
		j := keyControlJSON{Weight: c.Weight, Paused: c.Paused}
		if !c.Rate.IsZero() {
			j.Rate = c.Rate.RateString()
		}
		out[k] = j
	}
	return out
}

// fairDownstream is the configured fair downstream called name, or an
// error a user can act on.
func fairDownstream(pl *plan.Plan, name string) (*plan.Downstream, error) {
	pd, ok := pl.Downstream(name)
	if !ok {
		return nil, fmt.Errorf("unknown downstream %q (the config has %s)", name, downstreamNames(pl))
	}
	if pd.Shaping.Fairness == nil {
		return nil, fmt.Errorf("downstream %q has no fairness: key controls need fairness: {key: tenant} in its config", name)
	}
	return pd, nil
}

// keyChange is one change to a key's controls, checked against its
// downstream: what SetKey applies.
type keyChange struct {
	rate   *limiters.Limit // zero Limit: remove
	weight *float64        // 0: remove
	paused *bool
	clear  bool
}

// parseKeyRate reads a key's rate as ctl and the API take it ("5/s", a
// bare 5 per second, or "" / "clear" to remove it) and checks it with the
// file's rule for key_rate.
func parseKeyRate(pd *plan.Downstream, text string) (limiters.Limit, error) {
	if text == "" || text == "clear" {
		return limiters.Limit{}, nil
	}
	l, err := cliflags.ParseRate(text)
	if err != nil {
		return l, err
	}
	return l, pd.Shaping.CheckKeyRate(l)
}

// checkWeightReason is shaping.CheckKeyWeight in the words of a usage
// error (without the limiters package's prefix).
func checkWeightReason(w float64) error {
	if err := shaping.CheckKeyWeight(w); err != nil {
		return errors.New(rateReason(err))
	}
	return nil
}

// apply makes change ch to key of ds through ctl.
func (ch keyChange) apply(ctx context.Context, ctl *shaping.Control, ds, key string) error {
	if ch.clear {
		return ctl.ClearKey(ctx, ds, key)
	}
	if ch.rate != nil {
		if err := ctl.SetKeyRate(ctx, ds, key, *ch.rate); err != nil {
			return err
		}
	}
	if ch.weight != nil {
		if err := ctl.SetKeyWeight(ctx, ds, key, *ch.weight); err != nil {
			return err
		}
	}
	if ch.paused != nil {
		if *ch.paused {
			return ctl.PauseKey(ctx, ds, key)
		}
		return ctl.ResumeKey(ctx, ds, key)
	}
	return nil
}

// key runs "ctl key NAME [KEY ACTION [VALUE]]".
func (c *ctlCall) key() error {
	if len(c.rest) < 2 {
		return fmt.Errorf("%w: key takes NAME [KEY rate RATE|weight W|pause|resume|clear] (see shaper ctl help)", ErrUsage)
	}
	name := c.rest[1]
	pd, err := fairDownstream(c.pl, name)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if len(c.rest) == 2 {
		m, err := c.ctl.KeyControls(c.ctx, name)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(c.out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"downstream": name, "keys": toKeyControlsJSON(m)})
	}
	key := c.rest[2]
	if err := control.CheckKey(key); err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	ch, did, err := parseKeyAction(pd, c.rest[3:])
	if err != nil {
		return fmt.Errorf("%w: key %s %q: %v", ErrUsage, name, key, err)
	}
	if err := ch.apply(c.ctx, c.ctl, name, key); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "%s: key %q %s in every process\n", name, key, did)
	return nil
}

// parseKeyAction reads ACTION [VALUE] of ctl key, and says what it did.
func parseKeyAction(pd *plan.Downstream, args []string) (keyChange, string, error) {
	if len(args) == 0 {
		return keyChange{}, "", errors.New("want an action: rate RATE, weight W, pause, resume or clear")
	}
	var ch keyChange
	want := 1
	switch args[0] {
	case "rate", "weight":
		want = 2
	case "pause", "resume":
		p := args[0] == "pause"
		ch.paused = &p
	case "clear":
		ch.clear = true
	default:
		return ch, "", fmt.Errorf("unknown action %q (want rate, weight, pause, resume or clear)", args[0])
	}
	if len(args) != want {
		return ch, "", fmt.Errorf("%q takes %d value(s), got %d", args[0], want-1, len(args)-1)
	}
	switch args[0] {
	case "rate":
		l, err := parseKeyRate(pd, args[1])
		if err != nil {
			return ch, "", err
		}
		ch.rate = &l
		if l.IsZero() {
			return ch, "rate removed (back to the config's)", nil
		}
		return ch, "capped at " + l.RateString(), nil
	case "weight":
		w, err := strconv.ParseFloat(args[1], 64)
		if err != nil {
			return ch, "", fmt.Errorf("weight %q is not a number", args[1])
		}
		if err := checkWeightReason(w); err != nil {
			return ch, "", err
		}
		ch.weight = &w
		return ch, "weighted " + args[1], nil
	case "pause":
		return ch, "paused (its tasks wait; the other keys keep the rate)", nil
	case "resume":
		return ch, "resumed", nil
	}
	return ch, "cleared (back to the config)", nil
}

// mountKeyControl mounts the key controls of fair downstreams:
//
//	GET    /v1/downstreams/{name}/keys        every key control set
//	PUT    /v1/downstreams/{name}/keys/{key}  {"rate": "5/s", "weight": 3, "paused": true} (any of them)
//	DELETE /v1/downstreams/{name}/keys/{key}  clear the key's controls
//
// Every route needs the bearer token when one is configured.
func mountKeyControl(srv *server.Server, d *shaping.Dispatcher, pl *plan.Plan) {
	fair := func(w http.ResponseWriter, r *http.Request) (*plan.Downstream, bool) {
		pd, err := fairDownstream(pl, r.PathValue("name"))
		if err != nil {
			code := http.StatusBadRequest
			if _, ok := pl.Downstream(r.PathValue("name")); !ok {
				code = http.StatusNotFound
			}
			server.WriteError(w, code, err.Error())
			return nil, false
		}
		return pd, true
	}
	srv.Protected("GET /v1/downstreams/{name}/keys", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := fair(w, r); !ok {
			return
		}
		m, err := d.Control().KeyControls(r.Context(), r.PathValue("name"))
		respond(w, err, map[string]any{"downstream": r.PathValue("name"), "keys": toKeyControlsJSON(m)})
	}))
	srv.Protected("PUT /v1/downstreams/{name}/keys/{key}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pd, ok := fair(w, r)
		if !ok {
			return
		}
		ch, err := keyChangeFromBody(pd, r.Body)
		if err == nil {
			err = control.CheckKey(r.PathValue("key"))
		}
		if err != nil {
			server.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		writeKeyResult(w, r, d, ch)
	}))
	srv.Protected("DELETE /v1/downstreams/{name}/keys/{key}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := fair(w, r); ok {
			writeKeyResult(w, r, d, keyChange{clear: true})
		}
	}))
}

// keyChangeFromBody reads a PUT's body: {"rate": "5/s"|"", "weight": N,
// "paused": bool}, at least one of them.
func keyChangeFromBody(pd *plan.Downstream, body io.Reader) (keyChange, error) {
	var b struct {
		Rate   *string  `json:"rate"`
		Weight *float64 `json:"weight"`
		Paused *bool    `json:"paused"`
	}
	dec := json.NewDecoder(io.LimitReader(body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil || b.Rate == nil && b.Weight == nil && b.Paused == nil {
		return keyChange{}, errors.New(`body must be an object with any of {"rate": "5/s" ("" removes it), "weight": 3 (0 removes it), "paused": true|false}`)
	}
	ch := keyChange{weight: b.Weight, paused: b.Paused}
	if b.Rate != nil {
		l, err := parseKeyRate(pd, *b.Rate)
		if err != nil {
			return ch, fmt.Errorf("rate: %v", err)
		}
		ch.rate = &l
	}
	if b.Weight != nil {
		if err := checkWeightReason(*b.Weight); err != nil {
			return ch, err
		}
	}
	return ch, nil
}

// writeKeyResult applies ch and answers with the key's controls after it.
func writeKeyResult(w http.ResponseWriter, r *http.Request, d *shaping.Dispatcher, ch keyChange) {
	name, key := r.PathValue("name"), r.PathValue("key")
	if err := ch.apply(r.Context(), d.Control(), name, key); err != nil {
		if errors.Is(err, limiters.ErrInvalidLimit) {
			server.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		respond(w, err, nil)
		return
	}
	m, err := d.Control().KeyControls(r.Context(), name)
	respond(w, err, map[string]any{"downstream": name, "key": key, "controls": toKeyControlsJSON(map[string]shaping.KeyControl{key: m[key]})[key]})
}
