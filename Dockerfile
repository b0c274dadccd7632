# Tributary's image: one image, the process chosen by its argument
#   (gateway | runner | actors | start | admin ...).
# Targets: `cpu` (default; gateways, actor hosts, CPU runners) and `cuda` (GPU runners: the
# prebuilt CUDA binaries of node-llama-cpp need the CUDA runtime libraries).
#   docker build -t tributary:0.1.0 .
#   docker build --target cuda -t tributary:0.1.0-cuda .

FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
RUN npx tsc -p . && npm prune --omit=dev

FROM node:20-bookworm-slim AS cpu
# Sandbox hosts: bubblewrap, util-linux (prlimit, setpriv) and the Python sandboxes see read-only.
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap util-linux python3 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
ENV NODE_ENV=production TRIBUTARY_HOME=/var/lib/tributary
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/catalog ./catalog
# The in-sandbox agent and the app instances' launcher are Python, read from the source tree at run time.
COPY --from=build /app/modules/sandboxes/agent.py ./modules/sandboxes/agent.py
COPY --from=build /app/modules/apps/launcher.py ./modules/apps/launcher.py
RUN mkdir -p /var/lib/tributary && chown node:node /var/lib/tributary
USER node
ENTRYPOINT ["node", "dist/cli/main.js"]
CMD ["gateway"]

FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04 AS cuda
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
 && curl -fsSL https://deb.nodesource.com/setup_20.x | bash - \
 && apt-get install -y --no-install-recommends nodejs && rm -rf /var/lib/apt/lists/*
WORKDIR /app
ENV NODE_ENV=production TRIBUTARY_HOME=/var/lib/tributary
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/catalog ./catalog
RUN mkdir -p /var/lib/tributary
ENTRYPOINT ["node", "dist/cli/main.js"]
CMD ["runner"]

FROM cpu
