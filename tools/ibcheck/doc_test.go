package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/velo-go/velo/tools/ibcheck/internal/check"
)

var docPath = filepath.Join("..", "..", "docs", "ibcheck.md")

// goldenRegion matches a sample in docs/ibcheck.md: a marker naming a golden file (and optionally
// a line range), a fenced block, and an end marker.
var goldenRegion = regexp.MustCompile("(?s)<!-- golden ([^ ]+?)(?: lines=(\\d+)-(\\d+))? -->\n```(\\w+)\n(.*?)```\n<!-- /golden -->")

// TestDocSamples keeps the sample output in docs/ibcheck.md equal to the golden files it is taken
// from; -update copies them in.
func TestDocSamples(t *testing.T) {
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	out := goldenRegion.ReplaceAllStringFunc(string(doc), func(region string) string {
		m := goldenRegion.FindStringSubmatch(region)
		name, from, to, lang, body := m[1], m[2], m[3], m[4], m[5]
		golden, err := os.ReadFile(filepath.Join("testdata", "golden", name))
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", name, err))
			return region
		}
		want := string(golden)
		if from != "" {
			a, _ := strconv.Atoi(from)
			b, _ := strconv.Atoi(to)
			lines := strings.SplitAfter(want, "\n")
			if a < 1 || b > len(lines) || a > b {
				failed = append(failed, fmt.Sprintf("%s: lines %d-%d out of range", name, a, b))
				return region
			}
			want = strings.Join(lines[a-1:b], "")
		}
		if body != want {
			failed = append(failed, name)
		}
		rng := ""
		if from != "" {
			rng = " lines=" + from + "-" + to
		}
		return "<!-- golden " + name + rng + " -->\n```" + lang + "\n" + want + "```\n<!-- /golden -->"
	})
	if n := len(goldenRegion.FindAllString(string(doc), -1)); n == 0 {
		t.Fatal("docs/ibcheck.md has no sample regions")
	}
	if *update {
		if err := os.WriteFile(docPath, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if len(failed) > 0 {
		t.Errorf("docs/ibcheck.md samples differ from their golden files: %s (go test -run TestDocSamples -update)", strings.Join(failed, ", "))
	}
}

// TestDocListsEveryCheck: each check ID has its row in docs/ibcheck.md.
func TestDocListsEveryCheck(t *testing.T) {
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range check.Checks {
		if !strings.Contains(string(doc), "| `"+c.ID+"` |") {
			t.Errorf("docs/ibcheck.md has no table row for check %s", c.ID)
		}
	}
}

func keysOf(m map[string]any) []string {
	var k []string
	for key := range m {
		k = append(k, key)
	}
	sort.Strings(k)
	return k
}

// TestJSONSchemaV1 pins the fields of schema ibcheck/v1 over every golden JSON report: a field
// removed or renamed breaks this test, and must come with a new schema version and docs.
func TestJSONSchemaV1(t *testing.T) {
	top := []string{"checks", "counts", "cgo", "dev", "exit_code", "live", "port", "port_chosen_by", "schema", "strict", "sysfs", "verdict"}
	files, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	if len(files) == 0 {
		t.Fatal("no golden JSON")
	}
	statuses := map[string]bool{"pass": true, "warn": true, "fail": true, "skip": true, "not_compiled_in": true}
	probes := map[string]bool{"available": true, "not_available": true, "inconclusive": true}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		got := keysOf(doc)
		want := append([]string(nil), top...)
		if _, ok := doc["ucx_resources"]; ok {
			want = append(want, "ucx_resources")
		}
		sort.Strings(want)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: top-level fields %v, want %v", f, got, want)
		}
		if doc["schema"] != SchemaVersion {
			t.Errorf("%s: schema %v", f, doc["schema"])
		}
		for _, c := range doc["checks"].([]any) {
			cm := c.(map[string]any)
			for _, k := range keysOf(cm) {
				switch k {
				case "id", "group", "status", "probe", "finding", "fix", "facts":
				default:
					t.Errorf("%s: check field %q is not in the schema", f, k)
				}
			}
			if !statuses[cm["status"].(string)] {
				t.Errorf("%s: status %v", f, cm["status"])
			}
			if p, ok := cm["probe"]; ok && !probes[p.(string)] {
				t.Errorf("%s: probe %v", f, p)
			}
			if cm["status"] == "fail" && cm["fix"] == nil {
				t.Errorf("%s: %v fails without a fix", f, cm["id"])
			}
			if _, ok := cm["facts"].(map[string]any); !ok {
				t.Errorf("%s: %v has no facts object", f, cm["id"])
			}
		}
	}
}
