# Sourced by the fetch-* scripts: a wheel from PyPI, downloaded once into a cache folder.
#
#   wheel="$(cached_wheel TOOL CACHE REQUIREMENT FILE_PREFIX SIZE)"
#     e.g. cached_wheel fetch-nccl ~/.cache/pipescope/wheels nvidia-nccl-cu13==2.30.7 nvidia_nccl_cu13-2.30.7- "about 220 MB"
# Prints the path of the cached wheel whose file name starts with FILE_PREFIX, downloading
# REQUIREMENT (pip download --no-deps, binary only) first when there is none. A failed download
# (offline, no such version) is one line naming the wheel and where to put it by hand; pip's own
# report goes to CACHE/pip-download.log.
cached_wheel() {
  local tool="$1" cache="$2" requirement="$3" prefix="$4" size="$5" wheel
  mkdir -p "${cache}"
  wheel="$(ls "${cache}"/"${prefix}"*.whl 2>/dev/null | head -n 1 || true)"
  if [[ -z "${wheel}" ]]; then
    echo "${tool}: downloading ${requirement} (${size}) into ${cache}" >&2
    if ! python3 -m pip download --no-deps --only-binary=:all: --dest "${cache}" "${requirement}" \
         >"${cache}/pip-download.log" 2>&1; then
      echo "${tool}: error: cannot download ${requirement} from PyPI (offline?); put its wheel in ${cache} and run again (pip's report: ${cache}/pip-download.log)" >&2
      return 1
    fi
    wheel="$(ls "${cache}"/"${prefix}"*.whl | head -n 1)"
  fi
  echo "${wheel}"
}
