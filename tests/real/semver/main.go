// semver-oracle answers, with the libraries Flux's source-controller uses,
// what an OCIRepository's `ref.semver` selects: github.com/Masterminds/semver/v3
// for ranges and github.com/fluxcd/pkg/version for parsing tags.  The e2e test
// tests/e2e/test_semver_oracle.py feeds it a large table and checks that
// oci/semver.c gives the same answer for every case.
//
// Input (stdin, JSON):
//
//	{"ranges": [string], "versions": [string],
//	 "selections": [{"range": string, "tags": [string]}]}
//
// Output (stdout, JSON), in input order:
//
//	{"versions": [{"valid": bool}],              // fluxcd/pkg/version accepts it as a tag
//	 "order": [string],                          // per version i, for each j: '<' '=' '>' ('-' if either is invalid)
//	 "ranges": [{"error": string|null,           // NewConstraint refused the range
//	             "matches": string}],            // per version: '1' matches, '0' not, '-' invalid version
//	 "selections": [{"error": string|null, "tag": string|null,
//	                 "matching": int,                 // how many tags the range matches
//	                 "equal_best": [string]}]}        // the tags equal to the selected one
//
// A selection is what source-controller's getTagBySemver does: parse each tag,
// keep those the constraint checks, sort.Sort(sort.Reverse(Collection)) and
// take the first one's original text.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/Masterminds/semver/v3"
	"github.com/fluxcd/pkg/version"
)

type selection struct {
	Range string   `json:"range"`
	Tags  []string `json:"tags"`
}

type input struct {
	Ranges     []string    `json:"ranges"`
	Versions   []string    `json:"versions"`
	Selections []selection `json:"selections"`
}

type versionAnswer struct {
	Valid bool `json:"valid"`
}

type rangeAnswer struct {
	Error   *string `json:"error"`
	Matches string  `json:"matches"`
}

type selectionAnswer struct {
	Error    *string `json:"error"`
	Tag      *string `json:"tag"`
	Matching int     `json:"matching"`
	// The tags equal to the selected one (in sorted order): which of them
	// sort.Sort puts first is up to its algorithm past 12 elements.
	EqualBest []string `json:"equal_best"`
}

type output struct {
	Versions   []versionAnswer   `json:"versions"`
	Order      []string          `json:"order"`
	Ranges     []rangeAnswer     `json:"ranges"`
	Selections []selectionAnswer `json:"selections"`
}

func errText(err error) *string {
	s := err.Error()
	return &s
}

func orderRow(v *semver.Version, all []*semver.Version) string {
	row := make([]byte, len(all))
	for j, o := range all {
		switch {
		case v == nil || o == nil:
			row[j] = '-'
		case v.Compare(o) < 0:
			row[j] = '<'
		case v.Compare(o) > 0:
			row[j] = '>'
		default:
			row[j] = '='
		}
	}
	return string(row)
}

func matchRange(text string, parsed []*semver.Version) rangeAnswer {
	c, err := semver.NewConstraint(text)
	if err != nil {
		return rangeAnswer{Error: errText(err)}
	}
	row := make([]byte, len(parsed))
	for i, v := range parsed {
		switch {
		case v == nil:
			row[i] = '-'
		case c.Check(v):
			row[i] = '1'
		default:
			row[i] = '0'
		}
	}
	return rangeAnswer{Matches: string(row)}
}

// selectTag mirrors getTagBySemver in source-controller's OCIRepository
// reconciler (the registry's tag list in, one tag out).
func selectTag(s selection) selectionAnswer {
	c, err := semver.NewConstraint(s.Range)
	if err != nil {
		return selectionAnswer{Error: errText(err)}
	}
	var matching []*semver.Version
	for _, t := range s.Tags {
		v, err := version.ParseVersion(t)
		if err != nil {
			continue
		}
		if c.Check(v) {
			matching = append(matching, v)
		}
	}
	if len(matching) == 0 {
		return selectionAnswer{}
	}
	sort.Sort(sort.Reverse(semver.Collection(matching)))
	tag := matching[0].Original()
	ans := selectionAnswer{Tag: &tag, Matching: len(matching)}
	for _, v := range matching {
		if v.Equal(matching[0]) {
			ans.EqualBest = append(ans.EqualBest, v.Original())
		}
	}
	return ans
}

func main() {
	var in input
	dec := json.NewDecoder(os.Stdin)
	if err := dec.Decode(&in); err != nil {
		fmt.Fprintf(os.Stderr, "semver-oracle: reading the table from stdin: %v\n", err)
		os.Exit(2)
	}
	out := output{
		Versions:   make([]versionAnswer, len(in.Versions)),
		Order:      make([]string, len(in.Versions)),
		Ranges:     make([]rangeAnswer, len(in.Ranges)),
		Selections: make([]selectionAnswer, len(in.Selections)),
	}
	parsed := make([]*semver.Version, len(in.Versions))
	for i, text := range in.Versions {
		if v, err := version.ParseVersion(text); err == nil {
			parsed[i] = v
			out.Versions[i].Valid = true
		}
	}
	for i, v := range parsed {
		out.Order[i] = orderRow(v, parsed)
	}
	for i, r := range in.Ranges {
		out.Ranges[i] = matchRange(r, parsed)
	}
	for i, s := range in.Selections {
		out.Selections[i] = selectTag(s)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "semver-oracle: writing the answers: %v\n", err)
		os.Exit(1)
	}
}
