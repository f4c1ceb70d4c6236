// The Studio's views, one per tab (#chat, #contexts, #models, #server).
import * as chat from "./chat.js";
import * as contexts from "./contexts.js";
import * as models from "./models.js";
import * as server from "./server.js";

const VIEWS = { chat, contexts, models, server };

async function route() {
  const name = VIEWS[location.hash.slice(1)] ? location.hash.slice(1) : "chat";
  for (const v of Object.keys(VIEWS)) {
    document.getElementById(`view-${v}`).classList.toggle("active", v === name);
    document.querySelector(`nav a[data-view="${v}"]`).classList.toggle("active", v === name);
  }
  const status = document.getElementById("status");
  try {
    await VIEWS[name].show();
    status.textContent = "";
  } catch (e) {
    status.textContent = e.message;
    status.className = "error";
  }
}

window.addEventListener("hashchange", route);
route();
