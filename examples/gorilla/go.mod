module github.com/addrlimit/addrlimit/examples/gorilla

go 1.26.0

require github.com/addrlimit/addrlimit v0.1.0

require github.com/gorilla/mux v1.8.1

replace github.com/addrlimit/addrlimit => ../../
