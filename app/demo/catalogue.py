"""The built-in data of the trips and research demos: a small hotel catalogue and a small
library of facts, with the plain functions the tools call.

The hotels are made up; the facts are general knowledge, a few per topic, so a follow-up
question has more to find.
"""

from __future__ import annotations

import zlib

from app.demo.analysis import normalise, words
from app.demo.schemas import Confirmation, Hotel, Hotels, Lookup

HOTELS: dict[str, list[Hotel]] = {
    "Lisbon": [
        Hotel(name="Casa do Miradouro", price_per_night=140, rating=4.8),
        Hotel(name="Hotel Alfama Azul", price_per_night=95, rating=4.4),
        Hotel(name="Pensão Rio", price_per_night=60, rating=3.9),
    ],
    "Paris": [
        Hotel(name="Hôtel des Lilas", price_per_night=210, rating=4.7),
        Hotel(name="Le Petit Canal", price_per_night=130, rating=4.5),
        Hotel(name="Auberge Montmartre", price_per_night=85, rating=4.0),
    ],
    "Rome": [
        Hotel(name="Albergo Trastevere", price_per_night=110, rating=4.6),
        Hotel(name="Villa Aurelia Nova", price_per_night=180, rating=4.6),
        Hotel(name="Casa Esquilino", price_per_night=70, rating=3.8),
    ],
    "Kyoto": [
        Hotel(name="Ryokan Kamogawa", price_per_night=230, rating=4.9),
        Hotel(name="Gion Garden Inn", price_per_night=120, rating=4.3),
        Hotel(name="Hostel Nishiki", price_per_night=45, rating=4.1),
    ],
}
"""Each city's hotels, best rated first (ties: the cheaper first)."""


def city_named(name: str) -> str | None:
    """The catalogue's spelling of a city, whatever the case."""
    return next((city for city in HOTELS if city.lower() == name.strip().lower()), None)


def find_hotels(city: str) -> Hotels | None:
    """A city's hotels, or None for a city the catalogue does not have."""
    found = city_named(city)
    return None if found is None else Hotels(city=found, hotels=HOTELS[found])


def book(hotel: str, city: str, nights: int) -> Confirmation:
    """Book `hotel` for `nights`: a reference that depends only on what is booked, so the same
    booking made again after a crash gets the same one. `ValueError` for an unknown hotel."""
    found = city_named(city)
    chosen = next((h for h in HOTELS.get(found or "", []) if h.name == hotel), None)
    if found is None or chosen is None:
        raise ValueError(f"No hotel named {hotel!r} in {city!r}: use a name from find_hotels")
    reference = zlib.crc32(f"{found}|{hotel}|{nights}".encode()) % 100_000
    return Confirmation(
        confirmation=f"{found[:3].upper()}-{reference:05d}",
        hotel=hotel,
        nights=nights,
        total=chosen.price_per_night * nights,
    )


LIBRARY: dict[str, tuple[frozenset[str], list[str]]] = {
    "solar power": (
        frozenset({"solar", "sun", "sunlight", "photovoltaic", "pv"}),
        [
            "Photovoltaic cells turn sunlight directly into electricity.",
            "Most solar panels sold today are made of crystalline silicon.",
            "Solar output falls on cloudy days and stops at night, so it is usually paired "
            "with storage or other sources.",
            "Concentrated solar power plants use mirrors to focus sunlight and heat a fluid "
            "that drives a turbine.",
        ],
    ),
    "wind power": (
        frozenset({"wind", "turbine", "turbines", "offshore"}),
        [
            "Wind turbines turn the kinetic energy of moving air into electricity.",
            "The power in the wind grows with the cube of its speed, so a slightly windier "
            "site yields much more energy.",
            "Offshore wind farms get stronger and steadier winds than most sites on land.",
            "Turbines stop turning in very strong winds to protect themselves.",
        ],
    ),
    "hydropower": (
        frozenset({"hydro", "hydropower", "hydroelectric", "dam", "dams", "water", "river"}),
        [
            "Hydropower plants generate electricity from water flowing through turbines.",
            "A reservoir lets a hydropower plant follow demand, unlike a run-of-river plant.",
            "Pumped-storage plants pump water uphill when power is cheap and let it flow down "
            "when power is needed.",
            "Large dams flood valleys and change the ecosystems of their rivers.",
        ],
    ),
    "geothermal energy": (
        frozenset({"geothermal", "heat", "volcanic", "iceland"}),
        [
            "Geothermal plants use heat from inside the Earth to make steam that drives turbines.",
            "A geothermal plant runs day and night, whatever the weather.",
            "Iceland gets most of its heating and a large share of its electricity from "
            "geothermal sources.",
            "Ground-source heat pumps use the steady temperature a few metres underground to "
            "heat and cool buildings.",
        ],
    ),
    "batteries": (
        frozenset({"battery", "batteries", "storage", "lithium"}),
        [
            "Lithium-ion batteries store energy chemically and give it back as electricity.",
            "Grid batteries smooth out the swings of solar and wind power.",
            "A battery's capacity slowly declines as it goes through charge cycles.",
            "Pumped hydro is still the largest form of grid energy storage in the world.",
        ],
    ),
}
"""Each topic's key words and facts."""


def lookup(topic: str, offset: int = 0, limit: int = 2) -> Lookup:
    """The library's facts on the topic whose key words `topic` shares most (None when it
    shares none), from `offset` on, at most `limit`."""
    asked = {normalise(word) for word in words(topic)}
    best, overlap = None, 0
    for name, (keys, _) in LIBRARY.items():
        shared = len(asked & keys)
        if shared > overlap:
            best, overlap = name, shared
    if best is None:
        return Lookup(topic=None, facts=[], remaining=0)
    facts = LIBRARY[best][1]
    chosen = facts[offset : offset + limit]
    return Lookup(topic=best, facts=chosen, remaining=max(0, len(facts) - offset - len(chosen)))
