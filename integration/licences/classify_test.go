package licences

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Samples: the distinctive parts of each licence, laid out as real files
// lay them out (line breaks, quoting, bullets), plus texts that must not
// pass.
const (
	mitText = `MIT License

Copyright (c) 2016 Someone

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, ...

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.`

	bsd2Quoted = `Distributed under the Simplified BSD License:

> Redistribution and use in source and binary forms, with or without
> modification, are permitted provided that the following conditions
> are met:
>
> 1.  Redistributions of source code must retain the above copyright
>     notice, this list of conditions and the following disclaimer.
>
> 2.  Redistributions in binary form must reproduce the above
>     copyright notice, this list of conditions and the following disclaimer.`

	bsd3Text = `Redistribution and use in source and binary forms, with or without
modification, are permitted provided that the following conditions are
met:
   * Redistributions of source code must retain the above copyright
notice, this list of conditions and the following disclaimer.
   * Redistributions in binary form must reproduce the above
copyright notice, this list of conditions and the following disclaimer.
   * Neither the name of Google LLC nor the names of its
contributors may be used to endorse or promote products derived from
this software without specific prior written permission.`

	bsd4Text = bsd3Text + `
   * All advertising materials mentioning features or use of this software
must display the following acknowledgement.`

	apacheText = `
                                 Apache License
                           Version 2.0, January 2004
                        http://www.apache.org/licenses/`

	iscText = `Permission to use, copy, modify, and/or distribute this software for any
purpose with or without fee is hereby granted, provided that the above
copyright notice and this permission notice appear in all copies.`

	mplText = `Mozilla Public License Version 2.0
==================================
1.12. "Secondary License"
    means either the GNU General Public License, Version 2.0, the GNU
    Lesser General Public License, Version 2.1, the GNU Affero General
    Public License, Version 3.0, or any later versions of those licenses.`

	gplText = `                    GNU GENERAL PUBLIC LICENSE
                       Version 3, 29 June 2007`

	lgplText = `                   GNU LESSER GENERAL PUBLIC LICENSE
                       Version 3, 29 June 2007`

	agplText = `                    GNU AFFERO GENERAL PUBLIC LICENSE
                       Version 3, 19 November 2007`
)

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		name, text, want string
		compatible       bool
	}{
		{"MIT", mitText, MIT, true},
		{"BSD-2 quoted", bsd2Quoted, BSD2, true},
		{"BSD-3", bsd3Text, BSD3, true},
		{"BSD-3 in CRLF and upper case", strings.ToUpper(strings.ReplaceAll(bsd3Text, "\n", "\r\n")), BSD3, true},
		{"BSD-4", bsd4Text, BSD4, false},
		{"Apache-2.0", apacheText, Apache2, true},
		{"ISC", iscText, ISC, true},
		{"MPL-2.0 naming the GNU licences", mplText, MPL2, true},
		{"GPL", gplText, GPL, false},
		{"LGPL", lgplText, LGPL, false},
		{"AGPL", agplText, AGPL, false},
	} {
		got, err := Classify(c.text)
		if err != nil || got != c.want {
			t.Errorf("%s: Classify = %q, %v; want %q", c.name, got, err, c.want)
			continue
		}
		if Compatible(got) != c.compatible {
			t.Errorf("%s: Compatible(%q) = %v, want %v", c.name, got, !c.compatible, c.compatible)
		}
	}
}

func TestClassifyUnknown(t *testing.T) {
	for name, text := range map[string]string{
		"empty":      "",
		"prose":      "All rights reserved. Do not copy.",
		"half MIT":   "Permission is hereby granted, free of charge, to any person obtaining a copy",
		"split word": strings.Replace(mitText, "Permission", "Permis sion", 1),
	} {
		if id, err := Classify(text); !errors.Is(err, ErrUnknown) {
			t.Errorf("%s: Classify = %q, %v; want ErrUnknown", name, id, err)
		}
	}
}

func TestIsLicenceFile(t *testing.T) {
	for name, want := range map[string]bool{
		"LICENSE": true, "LICENSE.md": true, "LICENSE.txt": true, "license": true,
		"LICENCE": true, "COPYING": true, "COPYING.LESSER": true, "LICENSE-MIT": true,
		"README.md": false, "LICENSES": false, "licensing.go": false, "NOTICE": false,
	} {
		if got := IsLicenceFile(name); got != want {
			t.Errorf("IsLicenceFile(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestCheck(t *testing.T) {
	module := func(files map[string]string) string {
		dir := t.TempDir()
		for name, text := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	ids, err := Check(module(map[string]string{"LICENSE": mitText, "LICENSE-BSD": bsd3Text, "main.go": "package main"}))
	if err != nil || strings.Join(ids, ",") != "BSD-3-Clause,MIT" {
		t.Errorf("two licences: %v, %v", ids, err)
	}
	for name, c := range map[string]struct {
		files map[string]string
		want  error
	}{
		"none":         {map[string]string{"README": mitText}, ErrNoLicence},
		"unknown":      {map[string]string{"LICENSE": "All rights reserved."}, ErrUnknown},
		"incompatible": {map[string]string{"LICENSE": mitText, "COPYING": gplText}, ErrIncompatible},
	} {
		if ids, err := Check(module(c.files)); !errors.Is(err, c.want) {
			t.Errorf("%s: Check = %v, %v; want %v", name, ids, err, c.want)
		}
	}
}
