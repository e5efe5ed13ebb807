// Domain exceptions. Their messages name the place (file, rank, step, instruction) so a
// command-line tool can print them as one line.
#pragma once

#include <stdexcept>
#include <string>

namespace pipescope {

// A schedule that cannot be built, read or honoured.
class ScheduleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A schedule that was built or read but breaks the meaning of SPEC.md section 3.
class ValidationError : public ScheduleError {
 public:
  using ScheduleError::ScheduleError;
};

// Options a tool cannot honour (bad value, missing value).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace pipescope
