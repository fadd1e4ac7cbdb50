module github.com/addrlimit/addrlimit/examples/chi

go 1.26.0

require github.com/addrlimit/addrlimit v0.1.0

require github.com/go-chi/chi/v5 v5.5.0

replace github.com/addrlimit/addrlimit => ../../
