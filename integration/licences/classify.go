package licences

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
)

// Sentinel errors of Classify and Check.
var (
	// ErrUnknown: a text matches no licence this package knows.
	ErrUnknown = errors.New("unknown licence")
	// ErrIncompatible: a licence that dpvm, under Apache-2.0 and linked
	// statically, cannot take in.
	ErrIncompatible = errors.New("licence incompatible with Apache-2.0")
	// ErrNoLicence: a module directory without a licence file.
	ErrNoLicence = errors.New("no licence file")
)

// Licence identifiers, as SPDX spells them.
const (
	Apache2   = "Apache-2.0"
	MIT       = "MIT"
	BSD2      = "BSD-2-Clause"
	BSD3      = "BSD-3-Clause"
	BSD4      = "BSD-4-Clause"
	ISC       = "ISC"
	MPL2      = "MPL-2.0"
	GPL       = "GPL"
	LGPL      = "LGPL"
	AGPL      = "AGPL"
	SSPL      = "SSPL-1.0"
	BUSL      = "BUSL-1.1"
	CCBYNC    = "CC-BY-NC"
	Unlicense = "Unlicense"
)

// compatible lists the licences whose code a statically linked
// Apache-2.0 binary may contain: the permissive ones, and MPL-2.0, whose
// copyleft covers only the files under it (shipped unmodified, with their
// source available from their module).
var compatible = []string{Apache2, MIT, BSD2, BSD3, ISC, MPL2, Unlicense}

// Compatible reports whether a licence is compatible with Apache-2.0.
func Compatible(id string) bool { return slices.Contains(compatible, id) }

// rule recognises one licence: every phrase in all must occur.
type rule struct {
	id  string
	all []string
}

// rules are tried in order. The copyleft families come after MPL-2.0,
// whose text names the GNU licences as "Secondary Licenses"; BSD-3 and
// BSD-4 come before BSD-2, whose phrases they contain.
var rules = []rule{
	{Apache2, []string{"apache license", "version 2 0"}},
	{MPL2, []string{"mozilla public license version 2 0"}},
	{AGPL, []string{"gnu affero general public license"}},
	{LGPL, []string{"gnu lesser general public license"}},
	{LGPL, []string{"gnu library general public license"}},
	{GPL, []string{"gnu general public license"}},
	{SSPL, []string{"server side public license"}},
	{BUSL, []string{"business source license"}},
	{CCBYNC, []string{"noncommercial"}},
	{MIT, []string{
		"permission is hereby granted free of charge to any person obtaining a copy",
		"the above copyright notice and this permission notice shall be included",
	}},
	{ISC, []string{
		"permission to use copy modify and or distribute this software for any purpose with or without fee is hereby granted",
	}},
	{BSD4, []string{
		"redistribution and use in source and binary forms with or without modification are permitted",
		"all advertising materials mentioning features or use of this software",
	}},
	{BSD3, []string{
		"redistribution and use in source and binary forms with or without modification are permitted",
		"may be used to endorse or promote products derived from this software without specific prior written permission",
	}},
	{BSD2, []string{
		"redistribution and use in source and binary forms with or without modification are permitted",
		"redistributions of source code must retain the above copyright notice",
		"redistributions in binary form must reproduce the above copyright notice",
	}},
	{Unlicense, []string{"this is free and unencumbered software released into the public domain"}},
}

// normalise lowers text and turns every run of characters other than
// letters and digits into one space, with one space at each end.
func normalise(text string) string {
	var b strings.Builder
	b.Grow(len(text) + 2)
	b.WriteByte(' ')
	space := true
	for _, r := range strings.ToLower(text) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(r)
			space = false
		} else if !space {
			b.WriteByte(' ')
			space = true
		}
	}
	if !space {
		b.WriteByte(' ')
	}
	return b.String()
}

// Classify names the licence of a licence file's text. A text matching no
// known licence is ErrUnknown.
func Classify(text string) (string, error) {
	n := normalise(text)
	for _, r := range rules {
		ok := true
		for _, p := range r.all {
			if !strings.Contains(n, " "+p+" ") {
				ok = false
				break
			}
		}
		if ok {
			return r.id, nil
		}
	}
	return "", ErrUnknown
}

// IsLicenceFile reports whether a file name is that of a licence file:
// LICENSE, LICENCE or COPYING, in any case, with or without an extension
// (LICENSE.md, COPYING.txt, LICENSE-MIT).
func IsLicenceFile(name string) bool {
	u := strings.ToUpper(name)
	for _, p := range []string{"LICENSE", "LICENCE", "COPYING"} {
		if u == p || strings.HasPrefix(u, p+".") || strings.HasPrefix(u, p+"-") {
			return true
		}
	}
	return false
}

// Check classifies every licence file at the top of a module's directory
// and returns their licences, sorted. It fails when there is none, when
// one is unknown, and when one is incompatible with Apache-2.0; the error
// names the file.
func Check(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("licence of %s: %w", dir, err)
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() || !IsLicenceFile(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("licence: %w", err)
		}
		id, err := Classify(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if !Compatible(id) {
			return nil, fmt.Errorf("%s: %s: %w", path, id, ErrIncompatible)
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s: %w", dir, ErrNoLicence)
	}
	slices.Sort(ids)
	return ids, nil
}
