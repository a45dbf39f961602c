// Package soak holds the long runs of nodeinit that `make soak` starts: a
// proxy crash loop of minutes against the default restart backoff, and a
// fast crash loop of thousands of restarts that watches nodeinit's memory
// and file descriptors. Its tests carry the build tag soak, so that
// `go test ./...` leaves them out; `make soak` runs them with -tags soak.
package soak
