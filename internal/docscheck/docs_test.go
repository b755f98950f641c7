package docscheck_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/docscheck"
)

const docs = "../../docs"

// promtool returns the path of promtool, failing the test when it is
// missing (scripts/install-promtool.sh installs it).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is missing: the alert rules and the dashboard's queries are checked with it; install it with scripts/install-promtool.sh")
	}
	return p
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

var (
	metricToken = regexp.MustCompile(`\b((?:shaper|redis)_[a-z0-9_]+)\b`)
	known       = func() map[string]bool {
		m := map[string]bool{}
		for _, n := range docscheck.MetricNames() {
			m[n] = true
		}
		for _, n := range docscheck.RedisExporterMetrics {
			m[n] = true
		}
		return m
	}()
)

// unknownMetrics lists the metric-like names in s that shaper (or
// redis_exporter, for redis_*) does not export.
func unknownMetrics(s string) []string {
	var bad []string
	for _, m := range metricToken.FindAllStringSubmatch(s, -1) {
		if !known[m[1]] && !slices.Contains(bad, m[1]) {
			bad = append(bad, m[1])
		}
	}
	return bad
}

func TestMetricNamesAreKnown(t *testing.T) {
	names := docscheck.MetricNames()
	for _, want := range []string{"shaper_shaping_releases_total", "shaper_shaping_lateness_seconds_bucket",
		"shaper_admission_decisions_total", "shaper_queue_tasks", "shaper_redis_script_duration_seconds_count"} {
		if !slices.Contains(names, want) {
			t.Errorf("MetricNames() lacks %s: %v", want, names)
		}
	}
}

type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Schema     int    `json:"schemaVersion"`
	Templating struct {
		List []struct {
			Name, Type string
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		GridPos struct {
			H, W, X, Y int
		} `json:"gridPos"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// The Grafana dashboard parses, every query names known metrics only, and
// every query is valid PromQL (promtool checks each as a recording rule).
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(docs, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	if d.UID == "" || d.Title == "" || d.Schema < 30 {
		t.Errorf("uid %q title %q schemaVersion %d, want both set and a schema >= 30", d.UID, d.Title, d.Schema)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" || vars["downstream"] != "query" {
		t.Errorf("template variables %v, want datasource (datasource) and downstream (query)", vars)
	}
	ids := map[int]bool{}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	queries, covered := 0, map[string]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v out of the 24-column grid", p.Title, p.GridPos)
		}
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			if bad := unknownMetrics(tg.Expr); len(bad) > 0 {
				t.Errorf("panel %q query %s names unknown metrics %v", p.Title, tg.RefID, bad)
			}
			for _, m := range metricToken.FindAllString(tg.Expr, -1) {
				covered[m] = true
			}
			expr := strings.NewReplacer("$__rate_interval", "5m", "$downstream", ".*").Replace(tg.Expr)
			if strings.Contains(expr, "$") {
				t.Errorf("panel %q query %s uses an unknown variable: %s", p.Title, tg.RefID, tg.Expr)
			}
			q, _ := json.Marshal(expr)
			fmt.Fprintf(&rules, "      - record: dashboard:panel_%d_%s\n        expr: %s\n", p.ID, tg.RefID, q)
		}
	}
	if queries < 15 {
		t.Errorf("%d queries, want the dashboard to cover shaping, admission and Redis (>= 15)", queries)
	}
	// Every shaper metric appears on the dashboard.
	for _, n := range docscheck.MetricNames() {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
		if base == n && !covered[n] && !covered[n+"_bucket"] {
			t.Errorf("metric %s is on no panel", n)
		}
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out := run(t, ".", promtool(t), "check", "rules", path)
	if !strings.Contains(out, fmt.Sprintf("SUCCESS: %d rules found", queries)) {
		t.Errorf("promtool check rules on the dashboard's %d queries:\n%s", queries, out)
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// The alert rules have the expected structure, cover the four signals,
// name known metrics only, pass promtool check rules, and fire as their
// unit tests (docs/alerts.test.yml) say.
func TestAlertRules(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(docs, "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("docs/alerts.yml: %v", err)
	}
	alerts := map[string]bool{}
	for _, g := range rf.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: want a name and rules", g.Name)
		}
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("group %s: a rule without alert or expr: %+v", g.Name, r)
			}
			if sev := r.Labels["severity"]; sev != "critical" && sev != "warning" && sev != "info" {
				t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, sev)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("%s: no summary annotation", r.Alert)
			}
			if bad := unknownMetrics(r.Expr); len(bad) > 0 {
				t.Errorf("%s names unknown metrics %v", r.Alert, bad)
			}
		}
	}
	for _, want := range []string{"ShaperAdmissionRejectionSpike", "ShaperRedisScriptSlow", "RedisMemoryGrowing", "ShaperBacklogGrowing"} {
		if !alerts[want] {
			t.Errorf("no alert %s (the signals the issue names)", want)
		}
	}
	pt := promtool(t)
	out := run(t, docs, pt, "check", "rules", "alerts.yml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool check rules:\n%s", out)
	}
	out = run(t, docs, pt, "test", "rules", "alerts.test.yml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules:\n%s", out)
	}
}

// Every metric name the docs mention exists.
func TestDocsNameKnownMetrics(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(docs, "*.md"))
	readme, _ := filepath.Abs("../../README.md")
	files = append(files, readme)
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range unknownMetrics(string(b)) {
			if strings.HasPrefix(bad, "shaper_") {
				t.Errorf("%s names %s, which internal/metrics does not define", filepath.Base(f), bad)
			}
		}
		checked++
	}
	if checked < 5 {
		t.Errorf("checked %d files, want docs/*.md and README.md", checked)
	}
}

var (
	helpFlag  = regexp.MustCompile(`(?m)^\s+-(-?[a-z][a-z-]*)`)
	docFlag   = regexp.MustCompile("(?m)^\\| `--?([a-z][a-z-]*)")
	docCmd    = regexp.MustCompile("(?m)^\\| `([a-z]+)")
	ctlCmdRow = regexp.MustCompile(`(?m)^  ([a-z]+) `)
)

// section is the text of the "### title" subsection of md.
func section(t *testing.T, md, title string) string {
	t.Helper()
	i := strings.Index(md, "\n### "+title+"\n")
	if i < 0 {
		t.Fatalf("docs/operations.md has no section ### %s", title)
	}
	s := md[i+len(title)+6:]
	if j := strings.Index(s, "\n#"); j >= 0 {
		s = s[:j]
	}
	return s
}

func sorted(m [][]string) []string {
	set := map[string]bool{}
	for _, s := range m {
		set[strings.TrimPrefix(s[1], "-")] = true
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The flags each command's -h lists are the flags docs/operations.md
// documents, and the same for the subcommands of shaper ctl.
func TestHelpMatchesDocs(t *testing.T) {
	bin := t.TempDir()
	for _, c := range []string{"shaper", "enqueue"} {
		run(t, "../..", "go", "build", "-o", filepath.Join(bin, c), "./cmd/"+c)
	}
	md, err := os.ReadFile(filepath.Join(docs, "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	help := func(name string, args ...string) string {
		out, _ := exec.Command(filepath.Join(bin, name), args...).CombinedOutput() // -h exits non-zero
		return string(out)
	}
	cases := []struct {
		cmd, section  string
		args          []string
		helpRE, docRE *regexp.Regexp
	}{
		{"shaper", "shaper", []string{"-h"}, helpFlag, docFlag},
		{"shaper", "shaper ctl", []string{"ctl"}, ctlCmdRow, docCmd},
		{"enqueue", "enqueue", []string{"-h"}, helpFlag, docFlag},
	}
	for _, c := range cases {
		h := help(c.cmd, c.args...)
		if c.section == "shaper ctl" {
			_, h, _ = strings.Cut(h, "commands:")
		}
		got := sorted(c.helpRE.FindAllStringSubmatch(h, -1))
		want := sorted(c.docRE.FindAllStringSubmatch(section(t, string(md), c.section), -1))
		if len(got) < 2 {
			t.Errorf("%s %v lists %v; want its flags or commands:\n%s", c.cmd, c.args, got, h)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: --help lists %v, docs/operations.md (### %s) documents %v", c.cmd, got, c.section, want)
		}
	}
}

// yamlFields lists the yaml names of t's fields and of the structs inside.
func yamlFields(t reflect.Type, seen map[reflect.Type]bool) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return nil
	}
	seen[t] = true
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, name)
		out = append(out, yamlFields(f.Type, seen)...)
	}
	return out
}

var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// docs/configuration.md documents every field of the config, and its
// complete example is a valid config.
func TestConfigurationDocCoversEveryField(t *testing.T) {
	md, err := os.ReadFile(filepath.Join(docs, "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	fields := yamlFields(reflect.TypeFor[config.Config](), map[reflect.Type]bool{})
	if len(fields) < 40 {
		t.Fatalf("found %d config fields by reflection, want the whole tree", len(fields))
	}
	for _, f := range fields {
		if !strings.Contains(string(md), "`"+f+"`") && !strings.Contains(string(md), "## "+f) {
			t.Errorf("config field %q is not documented in docs/configuration.md", f)
		}
	}
	full := 0
	for _, m := range yamlBlock.FindAllStringSubmatch(string(md), -1) {
		if !strings.Contains(m[1], "downstreams:") {
			continue
		}
		full++
		if _, err := config.Parse([]byte(m[1])); err != nil {
			t.Errorf("the example config in docs/configuration.md does not load: %v", err)
		}
	}
	if full == 0 {
		t.Error("docs/configuration.md has no complete example (a yaml block with downstreams:)")
	}
}
