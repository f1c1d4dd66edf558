// Package licences classifies the licence texts of Go modules and holds the
// test that every module the build depends on is under a licence
// compatible with dpvm's, the Apache License 2.0.
//
// Classification is by distinctive phrases of each licence's text, after
// the text is normalised (lower case, every run of characters that are not
// letters or digits one space, so line breaks, quoting and markup do not
// matter). A text that matches no known licence is an error, never a
// guess: a new dependency with an unusual licence fails the test until a
// person has read it.
package licences
