// Built by the dag_upward_include_fails test as if it were part of backend/ (a target linking only
// mt_backend): ops/ sits above backend in the module DAG, so its headers must not be found.
#include "ops/linear.h"
