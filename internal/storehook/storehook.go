// Package storehook lets package storetest run a store behind the wrapper
// that a Limiter puts around every Store given to WithStore, so that the
// suite checks what production runs, without exporting the wrapper.
package storehook

// BehindFailLocal, set by package addrlimit, returns store (an
// addrlimit.Store) behind the FailLocal failure wrapper, with local tables
// of maxKeys buckets per policy.
var BehindFailLocal func(store any, maxKeys int) any
