# fastfair on the CPU: the package built from this tree with the simulator's extras, and the
# README's main job as the default command.
#
#   docker build -t fastfair-cpu .
#   docker run --rm fastfair-cpu                          # the main job: fastfair simulate
#   docker run --rm -v "$PWD/runs:/runs" fastfair-cpu python -m fastfair sweep --out /runs/x
#
# The CUDA variant starts from an official PyTorch CUDA image instead (docs/install.md,
# "A container").
FROM python:3.11-slim

# A C++17 compiler for the core; pip brings CMake and Ninja.
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ \
    && rm -rf /var/lib/apt/lists/*

# constraints.txt pins torch to its CPU build: PyTorch's CPU index holds it, PyPI's torch of the
# same version is the CUDA build (several GB).
ENV PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu \
    PIP_NO_CACHE_DIR=1 \
    FASTFAIR_CUDA=OFF

WORKDIR /fastfair
COPY . .
RUN pip install -c constraints.txt -e ".[sim]"

CMD ["python", "-m", "fastfair", "simulate"]
